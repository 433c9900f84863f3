"""Built-in task handlers."""
