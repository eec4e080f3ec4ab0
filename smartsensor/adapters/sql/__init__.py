"""The SQL store: engine and migrations, the named queries split by concern, and the round store."""
