"""`python -m vswitchctl`."""

import sys

from vswitchctl.main import main

sys.exit(main())
