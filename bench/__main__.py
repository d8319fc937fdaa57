"""`python -m bench`: the speed targets of issue 7 (see bench/speed.py). The cost-model check against Vidur's
measurements is `python -m bench.cost_vs_vidur`; trace loading speed is `python -m bench.load_speed`."""

from bench.speed import main

main()
