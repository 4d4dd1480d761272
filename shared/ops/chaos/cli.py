"""`callgate chaos`: run the system under real faults and check its invariants.

    callgate chaos --runs 200 --seed 1 [--json]      # random kills, Redis restart, lost answers
    callgate chaos --failover [--durability none]    # …the Redis master SIGKILLed (Sentinel)
    callgate chaos --cluster [--durability none]     # …a master of a Redis Cluster SIGKILLed
    callgate chaos --crash-points [--json]           # every crash point, every effect kind

Figures go to stdout (text, or JSON with ``--json``); progress to stderr.  Exit code 0 when
every invariant has its required value, 1 otherwise.
"""

from __future__ import annotations

import argparse
from typing import Any

from callgate.ops.chaos.report import render
from callgate.ops.chaos.run import ChaosOptions, run_chaos
from callgate.ops.stack import print_figures, progress_to_stderr, sigterm_as_interrupt


def cmd_chaos(args: argparse.Namespace) -> int:
    sigterm_as_interrupt()
    if args.crash_points:
        from callgate.ops.chaos.walk import render_walk, run_walk

        fig = run_walk(progress_to_stderr)
        text = render_walk(fig)
    else:
        options = ChaosOptions(
            runs=args.runs,
            seed=args.seed,
            rate=args.rate,
            kill_every_s=args.kill_every,
            replicas=args.replicas,
            booking_drop=args.booking_drop,
            settle_timeout_s=args.timeout,
            failover=args.failover,
            cluster=args.cluster,
            durability=args.durability,
        )
        progress_to_stderr(f"chaos: {options.runs} runs, seed {options.seed}")
        fig = run_chaos(options, progress_to_stderr)
        text = render(fig)
    print_figures(fig, text, as_json=args.json)
    return 0 if fig["ok"] else 1


def add_command(sub: Any) -> None:
    """``callgate chaos`` (see the module docstring)."""
    defaults = ChaosOptions()
    cmd = sub.add_parser("chaos", help="run under real faults; check the invariants")
    cmd.add_argument("--runs", type=int, default=defaults.runs)
    cmd.add_argument("--seed", type=int, default=defaults.seed)
    cmd.add_argument("--json", action="store_true", help="print the figures as JSON")
    cmd.add_argument(
        "--crash-points",
        action="store_true",
        help="walk every crash point of every worker for every effect kind",
    )
    cmd.add_argument("--rate", type=float, default=defaults.rate, help="runs submitted per s")
    cmd.add_argument(
        "--kill-every",
        type=float,
        default=defaults.kill_every_s,
        help="mean seconds between SIGKILLs",
    )
    cmd.add_argument(
        "--replicas", type=int, default=defaults.replicas, help="replicas of every worker kind"
    )
    cmd.add_argument(
        "--booking-drop",
        type=float,
        default=defaults.booking_drop,
        help="share of reservations whose answer is lost after the commit",
    )
    cmd.add_argument(
        "--timeout",
        type=float,
        default=defaults.settle_timeout_s,
        help="seconds every run may take to settle after the faults",
    )
    _add_failover(cmd, defaults)
    cmd.set_defaults(handler=cmd_chaos)


def _add_failover(cmd: Any, defaults: ChaosOptions) -> None:
    """The options that make the Redis fault a master's death."""
    cmd.add_argument(
        "--failover",
        action="store_true",
        help="Redis under Sentinel (a master, two replicas); SIGKILL the master, not a restart",
    )
    cmd.add_argument(
        "--cluster",
        action="store_true",
        help="a Redis Cluster (three masters, a replica each); SIGKILL the busiest master",
    )
    cmd.add_argument(
        "--durability",
        choices=("none", "replica"),
        default=defaults.durability,
        help="CALLGATE_WRITE_DURABILITY with --failover or --cluster (none shows what a "
        "failover can lose)",
    )
