"""smartsensor's Airflow provider: sensors that hand their wait to a smartsensor service and defer.

This package imports nothing of smartsensor itself (Airflow 2.10 pins SQLAlchemy < 2; smartsensor needs 2),
and nothing of Airflow at import time, so ``get_provider_info`` is cheap.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.3.0"


def get_provider_info() -> dict[str, Any]:
    """What Airflow's ProvidersManager lists for this package."""
    return {
        "package-name": "smartsensor-airflow",
        "name": "smartsensor",
        "description": "Drop-in Hive partition and success-file sensors that defer to a smartsensor service, "
        "which checks each distinct partition once for every task waiting on it.",
        "versions": [__version__],
    }
