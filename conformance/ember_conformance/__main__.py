import sys

from ember_conformance.cli import main

sys.exit(main())
