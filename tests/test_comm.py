"""The fabric's collectives (`servesim.cost.comm`): NVLink inside a domain, the NIC between nodes. Every number
by hand from the GPU files' datasheet values and the constants' sources (in the module and the files)."""

import pytest

from servesim.cost.comm import A2A_KERNELS, Fabric, allreduce_time
from servesim.cost.specs import GpuSpec, load_gpu
from servesim.errors import ConfigError

MIB = 2**20


def test_the_gpu_files_say_their_nvlink_domain_and_nic():
    # HGX boards hold 8 GPUs, an NVL72 rack 72; DGX H100/B200 a 400 Gb/s ConnectX-7 per GPU (50 GB/s one way),
    # DGX B300/GB300 an 800 Gb/s ConnectX-8 (100 GB/s), DGX A100 a 200 Gb/s ConnectX-6 (25 GB/s)
    got = {n: (load_gpu(n).nvlink_domain, load_gpu(n).network_bandwidth) for n in
           ("h100", "h200", "b200", "b300", "gb200", "gb300", "a100")}
    assert got == {"h100": (8, 50e9), "h200": (8, 50e9), "b200": (8, 50e9), "b300": (8, 100e9),
                   "gb200": (72, 50e9), "gb300": (72, 100e9), "a100": (8, 25e9)}
    # between nodes: NCCL send/recv between two DGX H100s, 19.1 us + bytes / 35.9 GB/s = 0.72 of 50 GB/s
    h100 = load_gpu("h100")
    assert (h100.network_latency, h100.network_efficiency) == (pytest.approx(19.1e-6), 0.72)


@pytest.mark.parametrize(("line", "said"), [
    ("nvlink_domain = 0", "nvlink_domain: expected an integer in \\[1, 1048576\\]"),
    ("network_gb_s = -1", "network_gb_s: expected a finite number > 0"),
    ("[efficiency]\nnetwork = 1.5", "efficiency.network: expected a fraction in \\(0, 1\\]"),
])
def test_a_bad_fabric_field_is_refused_naming_it(tmp_path, line, said):
    path = tmp_path / "gpu.toml"
    path.write_text("dense_bf16_tflops = 100\nmemory_bandwidth_gb_s = 1000\nmemory_gib = 40\n"
                    f"interconnect_gb_s = 600\npcie_gb_s = 64\n{line}\n")
    with pytest.raises(ConfigError, match=f"gpu.toml:[0-9]+: {said}"):
        load_gpu(str(path))


def test_an_nvl72_all_to_all_against_an_hgx_one_of_the_same_bytes():
    # EP 16, each GPU sending 16 MiB evenly to the 16 ranks (1 MiB each, its own included), NCCL's efficiencies.
    # HGX B200: 2 nodes of 8. 7 MiB go over NVLink (900 GB/s one way x 0.55 = 495 GB/s): 14.83 us; 8 MiB over the
    # NIC (50 GB/s x 0.72 = 36 GB/s): 233.0 us; at once, plus the network's 19.1 us: 252.1 us.
    hgx = Fabric.of(load_gpu("b200"))
    assert hgx.a2a_split(16 * MIB, 16) == (7 * MIB, 8 * MIB)
    assert hgx.all_to_all(16 * MIB, 16) == pytest.approx(19.1e-6 + 8 * MIB / 36e9)
    assert hgx.all_to_all(16 * MIB, 16) * 1e6 == pytest.approx(252.1, abs=0.05)
    # GB200 NVL72: the 16 share one NVLink domain: 15 MiB over NVLink, 31.78 us, plus the domain's 30 us
    nvl = Fabric.of(load_gpu("gb200"))
    assert nvl.a2a_split(16 * MIB, 16) == (15 * MIB, 0.0)
    assert nvl.all_to_all(16 * MIB, 16) == pytest.approx(30e-6 + 15 * MIB / 495e9)
    assert nvl.all_to_all(16 * MIB, 16) * 1e6 == pytest.approx(61.78, abs=0.01)
    # EP 8 stays inside the HGX board: 7/8 over NVLink and nothing over the NIC
    assert hgx.a2a_split(16 * MIB, 8) == (14 * MIB, 0.0)


def test_deepep_kernels_have_their_own_latency_and_efficiency():
    # low latency on the HGX B200 at EP 16: 27 us + max(7 MiB / (900 GB/s x 0.70), 8 MiB / (50 GB/s x 0.87))
    # = 27 + max(11.65, 192.84) us; normal kernels: the fabric's 19.1 us + 8 MiB / (50 GB/s x 0.86)
    hgx = Fabric.of(load_gpu("b200"))
    ll, normal = A2A_KERNELS["deepep_low_latency"], A2A_KERNELS["deepep_normal"]
    assert hgx.all_to_all(16 * MIB, 16, ll) == pytest.approx(27e-6 + 8 * MIB / (50e9 * 0.87))
    assert hgx.all_to_all(16 * MIB, 16, normal) == pytest.approx(19.1e-6 + 8 * MIB / (50e9 * 0.86))
    # inside one domain NVLink bounds it: 27 us + 14 MiB / (900 GB/s x 0.70)
    assert hgx.all_to_all(16 * MIB, 8, ll) == pytest.approx(27e-6 + 14 * MIB / 630e9)


def test_collectives_inside_a_domain_and_across_nodes():
    h100 = load_gpu("h100")
    f = Fabric.of(h100, h100.allreduce_protocols(8))
    # inside the board: the ring all-reduce of the GPU file's NCCL protocols, as before
    assert f.all_reduce(MIB, 8) == allreduce_time(MIB, 8, 450e9, h100.allreduce_protocols(8))
    # TP 16 over two nodes: the board's 30 us + 19.1 us x log2(2 nodes) + 2 x 15/16 x 1 MiB / (50 GB/s x 0.72)
    f16 = Fabric.of(h100)
    assert f16.all_reduce(MIB, 16) == pytest.approx(30e-6 + 19.1e-6 + 2 * 15 / 16 * MIB / 36e9)
    # 64 GPUs on 8 nodes: three levels of the tree
    assert f16.all_reduce(MIB, 64) == pytest.approx(30e-6 + 3 * 19.1e-6 + 2 * 63 / 64 * MIB / 36e9)
    # an all-gather of 4 ranks ending with 4 MiB each: 3 MiB move; inside the board at the H100 file's NCCL
    # protocols for 4 GPUs, min(28.0 us + 3 MiB / (450 GB/s x 0.812), 43.5 us + 3 MiB / (450 GB/s x 0.796));
    # spread over 16 GPUs (ranks 4 apart, two nodes) over the NIC
    assert f16.all_gather(4 * MIB, 4) == pytest.approx(28e-6 + 3 * MIB / (450e9 * 0.812))
    assert f16.all_gather(4 * MIB, 4, span=16) == pytest.approx(30e-6 + 19.1e-6 + 3 * MIB / 36e9)
    assert f16.reduce_scatter(4 * MIB, 4, span=16) == f16.all_gather(4 * MIB, 4, span=16)
    assert f16.all_reduce(MIB, 1) == f16.all_gather(MIB, 1) == f16.all_to_all(MIB, 1) == 0.0


def test_a_gpu_spec_built_in_python_checks_its_fabric():
    base = load_gpu("h100")
    fields = {f: getattr(base, f) for f in GpuSpec.__slots__}
    with pytest.raises(ConfigError, match="nvlink_domain: expected an integer"):
        GpuSpec(**(fields | {"nvlink_domain": 0}))
    with pytest.raises(ConfigError, match="network_efficiency: expected a fraction"):
        GpuSpec(**(fields | {"network_efficiency": 2.0}))
