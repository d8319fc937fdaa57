"""Executors (issue 17): the same seed gives the same table, in the same row order, on every executor."""



from servesim.plan import api

SWEEP = dict(num_requests=30, request_rates=[2, 8], knobs={"max_num_seqs": [4, 64]}, goodput="ttft:300 tpot:20")
CAPACITY = dict(goodput="ttft:15", attainment=100, num_requests=200, prompt_len="100", output_len="1",
                cost="toy", knobs={"max_num_seqs": [1, 8]}, burstiness=float("inf"))


def test_process_pool_gives_the_serial_table():
    serial = api.sweep("azure-conv-sample", workers=1, **SWEEP)
    assert api.sweep("azure-conv-sample", workers=2, **SWEEP).equals(serial)


def test_ray_gives_the_local_table(local_ray):
    on_ray = api.sweep("azure-conv-sample", executor="ray", **SWEEP)
    cap = api.capacity("random", executor="ray", **CAPACITY)
    assert on_ray.equals(api.sweep("azure-conv-sample", workers=1, **SWEEP))
    assert cap.configs == api.capacity("random", workers=1, **CAPACITY).configs
