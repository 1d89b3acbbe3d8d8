"""A connection to one broker as a client makes it: TLS, SASL, requests, its settings."""
