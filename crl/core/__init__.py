"""The config schema and the user-facing errors; imports no other layer of crl."""
