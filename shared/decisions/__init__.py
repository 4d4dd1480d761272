"""Human decisions on pending calls: the approval record and its rule, applying decisions
inside the validator, posting them (the desk), and scheduling expiry."""
