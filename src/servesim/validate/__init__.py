"""`servesim validate SOURCE`: servesim scored against measured deployments. `rows` reads a source into
deployments (model, GPU, engine, layout, client and load, measured metrics with their definitions); `score`
simulates each under its client and compares, metric by metric and group by group, naming every row out of
reach. See docs/accuracy.md."""
