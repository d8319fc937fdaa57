"""`servesim workload ...`: registered here."""
