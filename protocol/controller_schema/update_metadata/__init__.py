"""UpdateMetadata: one subpackage per version."""
