"""LeaderAndIsr: one subpackage per version."""
