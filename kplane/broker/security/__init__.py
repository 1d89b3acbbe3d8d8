"""TLS material: test PKI generation and keystore/truststore loading."""
