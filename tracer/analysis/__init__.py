"""The analysis: judging a stream against training. Never loaded in the serving process."""
