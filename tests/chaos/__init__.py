"""Fault injection: worker processes killed with SIGKILL at random points while runs go on.

`agent` is the agent the workers continue (its tools record every execution in a file
outside the database), `worker` starts and kills worker processes, `driver` plays the
people and the killer, and `checks` holds the promises up against what was stored.
"""
