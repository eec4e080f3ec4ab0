"""Alembic environment and revisions for the smartsensor metadata schema (loaded by Alembic by path)."""
