"""Client quotas (KIP-13, KIP-55, KIP-124, KIP-219, KIP-257, KIP-599, KIP-612)."""
