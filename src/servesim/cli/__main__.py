from servesim.cli import entry

entry()
