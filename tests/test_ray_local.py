"""webrl.run.ray_local: a local instance stays on loopback (its node, its actors' address and every
connection its processes hold), and the cluster-mode switch is restored for later joins."""
import ipaddress
import os

import psutil
import pytest

pytestmark = [pytest.mark.ray]


def _ray_processes() -> list[psutil.Process]:
    """This process and what it started (GCS, raylet, agents, workers: all descend from it)."""
    me = psutil.Process()
    return [me, *me.children(recursive=True)]


def _loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    return (getattr(address, "ipv4_mapped", None) or address).is_loopback  # ::ffff:127.0.0.1 too


def test_a_local_instance_registers_and_connects_on_loopback_only(ray_cluster):
    import ray
    from ray._private import ray_constants

    from webrl.run.ray_local import CLUSTER_MODE_ENV

    @ray.remote(num_cpus=0)
    class Probe:
        def address(self):
            return ray.util.get_node_ip_address()

    probe = Probe.remote()
    assert ray.get(probe.address.remote(), timeout=120) == "127.0.0.1"
    assert {n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]} == {"127.0.0.1"}
    bound, peers = set(), set()
    for proc in _ray_processes():
        try:
            conns = proc.net_connections(kind="inet")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        bound |= {c.laddr.ip for c in conns if c.status == psutil.CONN_LISTEN}
        peers |= {c.raddr.ip for c in conns if c.raddr}
    # listeners on loopback or on every address (gRPC's default), none on the interface address alone;
    # every connection made goes to loopback
    assert all(_loopback(ip) or ip in ("0.0.0.0", "::") for ip in bound), bound
    assert peers and all(_loopback(ip) for ip in peers), peers
    # the switch is back as it was for this process: a later ray.init(address=...) is a cluster join
    assert CLUSTER_MODE_ENV not in os.environ and ray_constants.ENABLE_RAY_CLUSTER
    ray.kill(probe)
