"""``python -m smartsensor.cli``: the same as the ``smartsensor`` console script."""

from smartsensor.cli import main

main()
