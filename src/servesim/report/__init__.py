"""Drawing a run: one offline HTML page (`html`), PNGs (`png`) and the notebook's figures (`figures`), all from
what `view` reads of a run's records (step panels, Gantt bars, scrubber steps, latency CDFs); `runs` simulates
the runs laid side by side. See docs/report.md."""
