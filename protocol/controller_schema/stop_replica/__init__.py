"""StopReplica: one subpackage per version."""
