//! A switch's set-up from the fabric description, installed through a backend: routes,
//! port masks, PFC speeds and the multicast group, on a two-tier leaf-spine fabric.

use std::cell::RefCell;
use std::net::Ipv4Addr;
use std::rc::Rc;
use std::sync::Arc;

use hawkmesh_dataplane::hawkeye::{self, program, HawkeyeParams};
use hawkmesh_dataplane::model::{DataPlane, IngressInput, Model, Routing};
use hawkmesh_dataplane::packets;
use hawkmesh_switch_agent::setup::{SetupError, SwitchSetup};
use hawkmesh_switch_agent::ModelBackend;
use hawkmesh_wire::dataplane::{CPU_PORT, MCAST_GROUP_ALL_PORTS};
use hawkmesh_wire::telemetry::FiveTuple;
use hawkmesh_wire::topology::{FabricTopology, LinkDesc, NodeDesc, NodeKind, PortRef};

/// Spines s0, s1 (ids 0, 1), leaves l0, l1 (2, 3), hosts h0..h3 (4..7, 10.0.0.1..4);
/// h0, h1 on l0 ports 0, 1; h2, h3 on l1; leaf port 2 → s0, 3 → s1; spine port n → leaf n.
fn leaf_spine(gbps: f64) -> FabricTopology {
    let mut nodes = Vec::new();
    for (i, name) in ["s0", "s1", "l0", "l1"].iter().enumerate() {
        nodes.push(NodeDesc {
            id: i as u32,
            name: name.to_string(),
            kind: NodeKind::Switch,
            tier: Some(if i < 2 { 1 } else { 0 }),
            ipv4: None,
        });
    }
    for h in 0..4u32 {
        nodes.push(NodeDesc {
            id: 4 + h,
            name: format!("h{h}"),
            kind: NodeKind::Host,
            tier: None,
            ipv4: Some([10, 0, 0, 1 + h as u8]),
        });
    }
    let link = |a: (u32, u16), b: (u32, u16)| LinkDesc {
        a: PortRef {
            node: a.0,
            port: a.1,
        },
        b: PortRef {
            node: b.0,
            port: b.1,
        },
        gbps,
        delay_ns: 1000,
    };
    let mut links = Vec::new();
    for h in 0..4u32 {
        links.push(link((4 + h, 0), (2 + h / 2, (h % 2) as u16)));
    }
    for leaf in 0..2u32 {
        for spine in 0..2u32 {
            links.push(link((2 + leaf, 2 + spine as u16), (spine, leaf as u16)));
        }
    }
    FabricTopology { nodes, links }
}

#[test]
fn routes_are_shortest_path_ecmp_to_every_nic() {
    let fabric = leaf_spine(100.0);
    let l0 = SwitchSetup::from_fabric(&fabric, "l0").expect("l0");
    let route = |s: &SwitchSetup, last: u8| s.routes.get(&Ipv4Addr::new(10, 0, 0, last)).cloned();
    assert_eq!(route(&l0, 1), Some(vec![0]));
    assert_eq!(route(&l0, 2), Some(vec![1]));
    assert_eq!(route(&l0, 3), Some(vec![2, 3]));
    assert_eq!(route(&l0, 4), Some(vec![2, 3]));
    let s1 = SwitchSetup::from_fabric(&fabric, "s1").expect("s1");
    assert_eq!(route(&s1, 1), Some(vec![0]));
    assert_eq!(route(&s1, 4), Some(vec![1]));
    assert_eq!(l0.port_gbps.len(), 4);
}

#[test]
fn the_set_up_installed_through_a_backend_forwards_and_replicates() {
    let fabric = leaf_spine(100.0);
    let setup = SwitchSetup::from_fabric(&fabric, "l0").expect("l0");
    let program = Arc::new(program(&HawkeyeParams::default()).expect("program"));
    let model = Rc::new(RefCell::new(
        Model::new(program.clone(), Routing::FromTable, CPU_PORT).expect("model"),
    ));
    let mut backend = ModelBackend::new(model.clone());
    setup.apply(&mut backend).expect("apply");
    assert_eq!(
        model.borrow().multicast_group(MCAST_GROUP_ALL_PORTS),
        Some(&[0u16, 1, 2, 3][..])
    );
    let mut uplinks = std::collections::BTreeSet::new();
    for sport in 49152..49152 + 32u16 {
        let t = FiveTuple::rocev2([10, 0, 0, 1], sport, [10, 0, 0, 3]);
        let bytes = packets::rocev2_data(&program, &t, 0, 2, 64, 1, 1000);
        let out = model
            .borrow_mut()
            .process(&bytes, &IngressInput::default(), 0)
            .expect("process");
        let ports: Vec<u16> = out.ports.iter().map(|(p, _)| *p).collect();
        let bucket = hawkeye::ecmp_bucket([10, 0, 0, 1].into(), [10, 0, 0, 3].into(), sport, 4791);
        assert_eq!(ports, [[2, 3][bucket as usize % 2]], "sport {sport}");
        uplinks.insert(ports[0]);
    }
    assert_eq!(uplinks.len(), 2, "both uplinks carry flows");
    // The local host is reached directly.
    let t = FiveTuple::rocev2([10, 0, 0, 3], 49152, [10, 0, 0, 2]);
    let bytes = packets::rocev2_data(&program, &t, 0, 2, 64, 1, 1000);
    let out = model
        .borrow_mut()
        .process(
            &bytes,
            &IngressInput {
                ingress_port: 2,
                ..IngressInput::default()
            },
            0,
        )
        .expect("process");
    assert_eq!(out.ports.iter().map(|(p, _)| *p).collect::<Vec<_>>(), [1]);
}

#[test]
fn a_switch_the_program_cannot_serve_is_refused_by_name() {
    let fabric = leaf_spine(100.0);
    assert_eq!(
        SwitchSetup::from_fabric(&fabric, "l9").unwrap_err(),
        SetupError::NoSwitch("l9".into())
    );
    assert_eq!(
        SwitchSetup::from_fabric(&fabric, "h0").unwrap_err(),
        SetupError::NoSwitch("h0".into()),
        "a host is not a switch"
    );
    let slow = leaf_spine(10.0);
    assert_eq!(
        SwitchSetup::from_fabric(&slow, "l0")
            .unwrap_err()
            .to_string(),
        "switch `l0` port 0: 10 Gbit/s has no PFC quanta conversion in the program"
    );
}
