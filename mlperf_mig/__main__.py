import sys

from mlperf_mig.cli import main

sys.exit(main())
