"""The layout of local real nodes: addresses, names and config files (no I/O)."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest
import yaml

from extender.devcluster import node_commands as plan


def _layout(slot: int = 3, count: int = 2) -> plan.Layout:
    return plan.plan_layout(
        slot, count, gpus=2, node_dir=Path("/w/real-nodes"), run_dir=Path("/run/g/s3")
    )


def test_two_clusters_on_one_host_share_no_address_bridge_subnet_or_cgroup() -> None:
    a, b = _layout(slot=0, count=8), _layout(slot=1, count=8)
    for attr in ("node_ip", "pod_cidr", "bridge", "cgroup_root", "network_name"):
        values = [getattr(n, attr) for n in (*a.nodes, *b.nodes)]
        assert len(set(values)) == len(values), attr
    assert a.dns_ip != b.dns_ip
    subnets = [ipaddress.ip_network(n.pod_cidr) for n in (*a.nodes, *b.nodes)]
    assert not any(x.overlaps(y) for i, x in enumerate(subnets) for y in subnets[i + 1 :])


def test_each_node_gets_its_own_pod_subnet_with_the_gateway_inside() -> None:
    for node in _layout().nodes:
        assert ipaddress.ip_address(node.gateway) in ipaddress.ip_network(node.pod_cidr)
        assert ipaddress.ip_address(node.node_ip) not in ipaddress.ip_network(node.pod_cidr)


def test_bridge_names_fit_the_kernel_limit_and_the_forward_chain_pattern() -> None:
    last = plan.plan_layout(
        plan.MAX_SLOTS - 1, plan.MAX_NODES_PER_SLOT, gpus=1, node_dir=Path("/n"), run_dir=Path("/r")
    )
    for node in last.nodes:
        assert len(node.bridge) <= 15
        assert node.bridge.startswith(plan.BRIDGE_PREFIX)


@pytest.mark.parametrize(
    ("slot", "count", "message"),
    [
        pytest.param(plan.MAX_SLOTS, 2, "slot", id="slot past the last"),
        pytest.param(0, 0, "1 to", id="no nodes"),
        pytest.param(0, plan.MAX_NODES_PER_SLOT + 1, "1 to", id="more nodes than a slot holds"),
    ],
)
def test_a_layout_that_does_not_fit_is_refused_with_the_limit(
    slot: int, count: int, message: str
) -> None:
    with pytest.raises(plan.PlanError, match=message):
        plan.plan_layout(slot, count, gpus=1, node_dir=Path("/n"), run_dir=Path("/r"))


def test_the_cni_network_masquerades_nothing_and_keeps_its_addresses_in_the_node_dir() -> None:
    node = _layout().nodes[1]
    conf = json.loads(plan.cni_conflist_text(node))
    bridge = conf["plugins"][0]
    assert bridge["bridge"] == node.bridge
    assert bridge["ipMasq"] is False
    assert bridge["ipam"]["ranges"] == [[{"subnet": node.pod_cidr, "gateway": node.gateway}]]
    assert bridge["ipam"]["dataDir"].startswith(str(node.dir))


def test_kubelet_config_fits_a_cgroup_v1_host_without_cap_sys_resource() -> None:
    node = _layout().nodes[0]
    text = plan.kubelet_config_text(
        node, client_ca=Path("/pki/ca.crt"), resolv_conf=Path("/w/resolv.conf"), dns_ip="10.250.3.2"
    )
    conf = yaml.safe_load(text)
    assert conf["cgroupDriver"] == "cgroupfs"
    assert conf["failCgroupV1"] is False
    assert conf["oomScoreAdj"] == 0
    assert conf["makeIPTablesUtilChains"] is False
    assert conf["cgroupRoot"] == node.cgroup_root
    assert conf["address"] == node.node_ip
    assert conf["clusterDNS"] == ["10.250.3.2"]
    assert conf["authentication"]["anonymous"]["enabled"] is False
    assert conf["containerRuntimeEndpoint"] == f"unix://{node.containerd_socket}"


def test_containerd_config_restricts_oom_scores_and_keeps_state_per_node() -> None:
    node = _layout().nodes[0]
    text = plan.containerd_config(node, Path("/w/cni"))
    assert "restrict_oom_score_adj = true" in text
    assert f'address = "{node.containerd_socket}"' in text
    assert f'root = "{node.dir / "containerd"}"' in text
    assert f'sandbox = "{plan.SANDBOX_IMAGE}"' in text
    assert "SystemdCgroup = false" in text


def test_containerd_reads_cdi_specs_from_its_own_node_only() -> None:
    first, second = _layout().nodes
    text = plan.containerd_config(first, Path("/w/cni"))
    assert "enable_cdi = true" in text
    assert f'cdi_spec_dirs = ["{first.cdi_dir}"]' in text
    assert first.cdi_dir != second.cdi_dir
    assert first.cdi_dir.is_relative_to(first.run_dir)  # removed with the node


def test_the_dra_driver_of_a_node_serves_that_node_from_its_kubelet_dirs() -> None:
    node = _layout().nodes[1]
    argv = plan.dra_driver_argv(Path("/b/dra-test-driver"), node, kubeconfig=Path("/k"))
    flags = dict(a.split("=", 1) for a in argv if a.startswith("--"))
    assert argv.index("kubelet-plugin") > argv.index("--kubeconfig=/k")
    assert flags["--drivername"] == plan.DRA_DRIVER
    assert flags["--node-name"] == node.name
    assert flags["--num-devices"] == "2"
    assert flags["--plugin-registration-path"] == str(node.plugin_registry_dir)
    assert flags["--datadir"] == str(node.plugins_dir)
    assert flags["--cdi-dir"] == str(node.cdi_dir)


def test_the_device_class_maps_the_extended_resource_only_when_asked() -> None:
    served = plan.dra_device_class("nvidia.com/gpu")
    assert served["metadata"]["name"] == plan.DRA_DEVICE_CLASS
    assert served["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    assert served["spec"]["selectors"] == [
        {"cel": {"expression": f'device.driver == "{plan.DRA_DRIVER}"'}}
    ]
    assert "extendedResourceName" not in plan.dra_device_class(None)["spec"]


def test_unix_socket_paths_stay_under_the_kernel_limit_however_deep_the_workdir() -> None:
    deep = Path("/tmp") / ("d" * 200)
    layout = plan.plan_layout(
        plan.MAX_SLOTS - 1,
        plan.MAX_NODES_PER_SLOT,
        gpus=1,
        node_dir=deep,
        run_dir=Path("/run/gang-extender/s31"),
    )
    for node in layout.nodes:
        # kubelet's own sockets are <root>/pod-resources/<10 digits> and the like.
        sockets = [
            Path(str(node.containerd_socket) + ".ttrpc"),
            node.kubelet_root / "pod-resources" / "1234567890",
            node.plugin_registry_dir / "fake-gpu.sock",
            node.plugin_registry_dir / f"{plan.DRA_DRIVER}-reg.sock",
            node.plugins_dir / plan.DRA_DRIVER / "dra.sock",
        ]
        for socket in sockets:
            assert len(str(socket)) < 108, socket


def test_coredns_serves_the_cluster_domain_on_the_dns_address_only() -> None:
    text = plan.corefile("10.250.3.2", Path("/w/kubeconfig"))
    assert "bind 10.250.3.2" in text
    assert f"kubernetes {plan.CLUSTER_DOMAIN}" in text
    assert "forward" not in text
