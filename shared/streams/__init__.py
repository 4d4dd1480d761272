"""The consumer-group loop every worker runs (`worker`), one delivery's fate (`delivery`), its
Redis round trips (`commands`), heartbeats and trimming (`upkeep`), and how a worker process
starts (`service`)."""
