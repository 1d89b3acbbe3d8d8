"""What the broker and the client share: key material, JAAS text, ACLs, the config APIs'
codes, the connection to a broker."""
