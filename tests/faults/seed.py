"""The suite's random seed: `VSWITCH_FAULT_SEED`, or drawn once per run.

It is printed in pytest's terminal summary and quoted in every assertion message, so
`VSWITCH_FAULT_SEED=<seed> pytest tests/faults` replays the same sequence of choices (the exact
moments the kills land still vary with the machine's timing).
"""

from __future__ import annotations

import os
import random

SEED_ENV = "VSWITCH_FAULT_SEED"
SEED = int(os.environ.get(SEED_ENV) or random.SystemRandom().randrange(2**32))
