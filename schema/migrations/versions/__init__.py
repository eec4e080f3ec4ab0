"""Alembic revision scripts, applied in order by ``smartsensor db init``."""
