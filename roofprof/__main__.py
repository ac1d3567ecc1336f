import sys

from roofprof.cli import main

sys.exit(main())
