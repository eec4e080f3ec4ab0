"""Domain: states and transition rules, timing, keys, hashing, routing and lease rules. Imports no other layer."""
