"""`servesim cost`, `models`, `gpus`, `calibrate`: registered here."""
