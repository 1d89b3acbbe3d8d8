"""Utilities shared by the broker's packages (Kafka's kafka.utils): the timer and the purgatory
of delayed operations."""
