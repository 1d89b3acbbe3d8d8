"""What the broker and the client share: key material, JAAS text, the connection to a broker."""
