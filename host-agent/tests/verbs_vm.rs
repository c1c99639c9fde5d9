//! The verbs UD transport on real RDMA: two qemu VMs (software emulation, Debian 12's stock
//! kernel) with Soft-RoCE (`rdma_rxe`) on a shared emulated link, one probing the other
//! with `hawkmesh-verbs-probe` (the probing engine over `VerbsTransport`), tcpdump in the
//! prober's VM recording what goes on the wire; then both run the host agent's daemon with
//! the verbs transport and eBPF service tracing against an analyzer on this host (reached
//! through qemu's user network). hw-lab/soft-roce.md describes the lab.
//!
//! Needs root, `qemu-system-x86_64`, `debootstrap` and `mkfs.ext4` (Debian packages
//! qemu-system-x86, debootstrap, e2fsprogs; `.ci/run` installs them) and, the first time, a
//! Debian mirror: the root file system is built with debootstrap and cached under the
//! target directory (`HAWKMESH_VM_ROOTFS` names an existing one instead). Without any of
//! these the test fails, saying which.

use std::fs;
use std::io::Read;
use std::net::{SocketAddr, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hawkmesh_analyzer_server::pingmesh::PingmeshConfig;
use hawkmesh_analyzer_server::tls::{Pki, TlsMode};
use hawkmesh_analyzer_server::{start, ServerConfig};
use hawkmesh_host_agent::daemon::config::qpn_of;
use hawkmesh_host_agent::verbs::rxe_ud_source_port;
use hawkmesh_proto::v1 as pb;
use hawkmesh_wire::roce::{flow_label_to_udp_sport, udp_sport};
use hawkmesh_wire::topology::{FabricTopology, LinkDesc, NodeDesc, NodeKind, PortRef};

/// The Debian packages of the guest (FACTS.md "A real RDMA lab on this machine").
const PACKAGES: &str = "linux-image-amd64,initramfs-tools,rdma-core,ibverbs-utils,\
                        ibverbs-providers,iproute2,kmod,udev,procps,tcpdump";
const SUITE: &str = "bookworm";
const PROBES: usize = 12;
const SRC_PORTS: [u16; 3] = [0xC001, 0xD00D, 0xFFFF];
/// The GRH flow label of the second RC connection (`hawkmesh-verbs-probe rc-serve` /
/// `rc-connect`, both ends): 0x1234, which maps to UDP source port 0xD234.
const RC_FLOW_LABEL: u32 = 0x1234;
/// A second probing run with netem delaying the prober's egress by this much.
const NETEM_DELAY_MS: u64 = 20;
const NETEM_PROBES: usize = 6;
/// The netem run's only source port (its lines are told from the first run's by it).
const NETEM_PORT: u16 = 0xE001;
/// The flow label of the RC connection the daemons trace in the daemon phase.
const SERVICE_FLOW_LABEL: u32 = 0x2345;
const PROBER_IP: &str = "10.77.0.1";
const RESPONDER_IP: &str = "10.77.0.2";
/// Both VMs must have powered off by then.
const VM_DEADLINE: Duration = Duration::from_secs(420);

/// The guest's init: network, Soft-RoCE, tcpdump, the role's program, results on the
/// serial console as `HM ` lines, power off.
const GUEST_SCRIPT: &str = r#"#!/bin/sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sys /sys
mountpoint -q /dev || mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
for arg in $(cat /proc/cmdline); do
  case "$arg" in
    hm_role=*) ROLE="${arg#hm_role=}" ;;
    hm_ip=*) IP="${arg#hm_ip=}" ;;
    hm_peer=*) PEER="${arg#hm_peer=}" ;;
    hm_probes=*) PROBES="${arg#hm_probes=}" ;;
    hm_ports=*) PORTS="${arg#hm_ports=}" ;;
    hm_flow=*) FLOW="${arg#hm_flow=}" ;;
    hm_netem=*) NETEM="${arg#hm_netem=}" ;;
    hm_netem_probes=*) NETEM_PROBES="${arg#hm_netem_probes=}" ;;
    hm_netem_port=*) NETEM_PORT="${arg#hm_netem_port=}" ;;
    hm_host=*) HOST="${arg#hm_host=}" ;;
    hm_aport=*) APORT="${arg#hm_aport=}" ;;
    hm_flow2=*) FLOW2="${arg#hm_flow2=}" ;;
  esac
done
say() { echo "HM $*"; }
finish() { say "end"; sync; echo 1 > /proc/sys/kernel/sysrq; echo o > /proc/sysrq-trigger; sleep 30; }
say "up role=$ROLE uptime=$(cut -d' ' -f1 /proc/uptime)"
ip link set lo up
ip addr add "$IP/24" dev ens3 && ip link set ens3 up || { say "error network"; finish; }
modprobe rdma_rxe || { say "error modprobe rdma_rxe"; finish; }
rdma link add rxe0 type rxe netdev ens3 || { say "error rdma link add"; finish; }
say "rxe uptime=$(cut -d' ' -f1 /proc/uptime) $(rdma link show rxe0/1 | tr '\n' ' ')"
if [ "$ROLE" = respond ]; then
  # The eBPF service tracer first (ib_core is loaded now), then the RC service it must see.
  /opt/hawkmesh-qp-trace --seconds 200 > /tmp/trace.txt 2>&1 &
  TRACE=$!
  for i in $(seq 1 300); do grep -q "HM trace" /tmp/trace.txt && break; sleep 0.2; done
  grep -q "HM trace" /tmp/trace.txt || say "error the tracer printed nothing in 60 s"
  say "tracer uptime=$(cut -d' ' -f1 /proc/uptime)"
  timeout 150 ibv_rc_pingpong -d rxe0 -g 1 -s 64 -n 3 > /tmp/rc.txt 2>&1 &
  RC=$!
  /opt/hawkmesh-verbs-probe rc-serve --device rxe0 --control-port 18601 \
    --flow-label "$FLOW" --seconds 150 > /tmp/rcfl.txt 2>&1 &
  RCFL=$!
  /opt/hawkmesh-verbs-probe respond --device rxe0 --seconds 150
  say "exit $?"
  wait $RC
  wait $RCFL
  sleep 1; kill $TRACE; wait $TRACE
  sed 's/^/HM rc /' /tmp/rc.txt
  cat /tmp/rcfl.txt
  cat /tmp/trace.txt
else
  tcpdump -i ens3 -nn -l -q -c 400 udp port 4791 > /tmp/ud.txt 2>/dev/null &
  DUMP=$!
  # tcpdump needs a moment to start; the program waits for the responder itself.
  sleep 2
  /opt/hawkmesh-verbs-probe probe --device rxe0 --peer "$PEER" --probes "$PROBES" \
    --src-ports "$PORTS" --interval-ms 50 --seconds 150 --no-done
  say "exit $?"
  sleep 1; kill $DUMP; wait $DUMP
  sed 's/^/HM wire-ud /' /tmp/ud.txt
  # Again with netem delaying this side's egress: the RTT must carry the delay.
  say "netem on"
  tc qdisc add dev ens3 root netem delay "${NETEM}ms" || say "error tc qdisc add netem"
  /opt/hawkmesh-verbs-probe probe --device rxe0 --peer "$PEER" --probes "$NETEM_PROBES" \
    --src-ports "$NETEM_PORT" --interval-ms 50 --seconds 60
  say "exit $?"
  tc qdisc del dev ens3 root
  say "netem off"
  tcpdump -i ens3 -nn -l -q -c 400 udp port 4791 > /tmp/rcw.txt 2>/dev/null &
  DUMP=$!
  sleep 2
  for i in 1 2 3 4 5 6 7 8 9 10; do
    timeout 60 ibv_rc_pingpong -d rxe0 -g 1 -s 64 -n 3 "$PEER" > /tmp/rc.txt 2>&1 && break
    sleep 1
  done
  sleep 1; kill $DUMP; wait $DUMP
  sed 's/^/HM rc /' /tmp/rc.txt
  sed 's/^/HM wire-rc /' /tmp/rcw.txt
  # A second RC connection whose QPs both set a flow label.
  tcpdump -i ens3 -nn -l -q -c 400 udp port 4791 > /tmp/flw.txt 2>/dev/null &
  DUMP=$!
  sleep 2
  /opt/hawkmesh-verbs-probe rc-connect --device rxe0 --peer "$PEER" --control-port 18601 \
    --flow-label "$FLOW" --seconds 60
  sleep 1; kill $DUMP; wait $DUMP
  sed 's/^/HM wire-fl /' /tmp/flw.txt
fi
# The daemon phase: `hawkmesh host-agent`'s daemon with the verbs transport and eBPF service
# tracing, against the analyzer on the host (10.0.2.2 through qemu's user network), while
# an RC connection with flow label FLOW2 is opened and held between the two VMs.
NET2=$(ls /sys/class/net | grep -v -e '^lo$' -e '^ens3$' | head -n 1)
ip addr add 10.0.2.15/24 dev "$NET2" && ip link set "$NET2" up || say "error second network $NET2"
mkdir -p /tmp/state
cat > /tmp/agent.toml <<EOF
host = "$HOST"
state_dir = "/tmp/state"
[analyzer]
endpoint = "https://10.0.2.2:$APORT"
ca = "/opt/pki/ca.pem"
cert = "/opt/pki/$HOST.pem"
key = "/opt/pki/$HOST-key.pem"
name = "analyzer.lab"
[probing]
transport = "verbs"
timeout_ms = 2000
pinglist_refresh_ms = 2000
[upload]
interval_ms = 1000
drain_ms = 5000
[service_tracing]
source = "ebpf"
poll_ms = 500
interval_ms = 100
[metrics]
listen = "127.0.0.1:9464"
[[interface]]
nic = 0
ip = "$IP"
id = 1
rdma_device = "rxe0"
EOF
say "daemon start uptime=$(cut -d' ' -f1 /proc/uptime)"
/opt/hawkmesh-verbs-probe daemon --config /tmp/agent.toml --seconds 55 > /tmp/daemon.txt 2>&1 &
DAEMON=$!
sleep 20
if [ "$ROLE" = respond ]; then
  /opt/hawkmesh-verbs-probe rc-serve --device rxe0 --control-port 18602 \
    --flow-label "$FLOW2" --hold-seconds 20 --seconds 60 > /tmp/svc.txt 2>&1
else
  /opt/hawkmesh-verbs-probe rc-connect --device rxe0 --peer "$PEER" --control-port 18602 \
    --flow-label "$FLOW2" --hold-seconds 20 --seconds 60 > /tmp/svc.txt 2>&1
fi
wait $DAEMON
say "daemon exit $? uptime=$(cut -d' ' -f1 /proc/uptime)"
sed 's/^HM /HM d3-/' /tmp/svc.txt /tmp/daemon.txt
finish
"#;

fn fail(message: impl AsRef<str>) -> ! {
    panic!("verbs VM lab: {}", message.as_ref());
}

fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The Debian mirror apt uses on this machine (deb822 `URIs:` or a one-line `deb` entry).
fn mirror() -> String {
    let mut texts = Vec::new();
    if let Ok(dir) = fs::read_dir("/etc/apt/sources.list.d") {
        for entry in dir.flatten() {
            texts.push(fs::read_to_string(entry.path()).unwrap_or_default());
        }
    }
    texts.push(fs::read_to_string("/etc/apt/sources.list").unwrap_or_default());
    for text in &texts {
        for line in text.lines() {
            let line = line.trim();
            let uri = line
                .strip_prefix("URIs:")
                .map(str::trim)
                .or_else(|| line.strip_prefix("deb ").map(str::trim));
            if let Some(uri) = uri.and_then(|u| u.split_whitespace().next()) {
                if uri.ends_with("/debian") {
                    return uri.to_string();
                }
            }
        }
    }
    "http://deb.debian.org/debian".into()
}

fn run(command: &mut Command, what: &str) {
    let output = command
        .output()
        .unwrap_or_else(|e| fail(format!("{what}: cannot run: {e}")));
    if !output.status.success() {
        let err = String::from_utf8_lossy(&output.stderr);
        let out = String::from_utf8_lossy(&output.stdout);
        let tail = |s: &str| s.lines().rev().take(15).collect::<Vec<_>>().join("\n");
        fail(format!(
            "{what}: {}\n--- stderr (last lines, reversed)\n{}\n--- stdout\n{}",
            output.status,
            tail(&err),
            tail(&out)
        ));
    }
}

/// The guest root file system: the one named by HAWKMESH_VM_ROOTFS, or one built with
/// debootstrap under the target directory (kept for the next run).
fn rootfs(work: &Path) -> PathBuf {
    if let Some(dir) = std::env::var_os("HAWKMESH_VM_ROOTFS") {
        let dir = PathBuf::from(dir);
        if !dir.join("boot").is_dir() {
            fail(format!(
                "HAWKMESH_VM_ROOTFS={}: no boot/ in it",
                dir.display()
            ));
        }
        return dir;
    }
    let dir = work.join("rootfs");
    let stamp = dir.join(".hawkmesh-rootfs");
    let wanted = format!("{SUITE} {PACKAGES}");
    if fs::read_to_string(&stamp).is_ok_and(|s| s == wanted) {
        return dir;
    }
    if dir.exists() {
        fs::remove_dir_all(&dir)
            .unwrap_or_else(|e| fail(format!("removing {}: {e}", dir.display())));
    }
    let mirror = mirror();
    let started = Instant::now();
    let output = Command::new("debootstrap")
        .args(["--variant=minbase", &format!("--include={PACKAGES}"), SUITE])
        .arg(&dir)
        .arg(&mirror)
        .output()
        .unwrap_or_else(|e| fail(format!("debootstrap: cannot run: {e}")));
    if !output.status.success() {
        let log = fs::read_to_string(dir.join("debootstrap/debootstrap.log")).unwrap_or_default();
        let text = format!(
            "{}\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
            log
        );
        let last: Vec<&str> = text.lines().rev().take(12).collect();
        let unreachable = text.contains("Failed getting release file")
            || text.contains("Couldn't download")
            || text.contains("Could not resolve")
            || text.contains("Connection refused");
        fail(format!(
            "debootstrap {SUITE} from {mirror} failed ({}){}:\n{}",
            output.status,
            if unreachable {
                ": the mirror could not be reached"
            } else {
                ""
            },
            last.into_iter().rev().collect::<Vec<_>>().join("\n")
        ));
    }
    // Smaller image, faster mkfs: no package cache, no documentation.
    let _ = fs::remove_dir_all(dir.join("var/cache/apt/archives"));
    let _ = fs::remove_dir_all(dir.join("usr/share/doc"));
    let _ = fs::remove_dir_all(dir.join("usr/share/man"));
    fs::write(&stamp, &wanted).unwrap_or_else(|e| fail(format!("{}: {e}", stamp.display())));
    eprintln!(
        "verbs VM lab: debootstrap {SUITE} from {mirror}: {:.0} s",
        started.elapsed().as_secs_f64()
    );
    dir
}

/// The one file in `dir` whose name starts with `prefix`.
fn boot_file(dir: &Path, prefix: &str) -> PathBuf {
    let mut found: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| fail(format!("{}: {e}", dir.display())))
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
        .collect();
    found.sort();
    found
        .pop()
        .unwrap_or_else(|| fail(format!("no {prefix}* in {}", dir.display())))
}

fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| fail(format!("a free UDP port: {e}")))
}

struct Vm {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Drop for Vm {
    fn drop(&mut self) {
        // A VM still running when the test gives up is stopped (qemu is our child).
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[allow(clippy::too_many_arguments)]
fn boot(
    name: &'static str,
    work: &Path,
    root: &Path,
    image: &Path,
    ports: (u16, u16),
    mac: &str,
    role_args: &str,
) -> Vm {
    let log = work.join(format!("{name}.log"));
    let _ = fs::remove_file(&log);
    let kernel = boot_file(&root.join("boot"), "vmlinuz-");
    let initrd = boot_file(&root.join("boot"), "initrd.img-");
    let child = Command::new("qemu-system-x86_64")
        .args(["-accel", "tcg", "-smp", "1", "-m", "1024"])
        .args(["-display", "none", "-monitor", "none", "-no-reboot"])
        .arg("-serial")
        .arg(format!("file:{}", log.display()))
        .arg("-kernel")
        .arg(&kernel)
        .arg("-initrd")
        .arg(&initrd)
        .arg("-drive")
        .arg(format!(
            "file={},if=virtio,format=raw,snapshot=on",
            image.display()
        ))
        .arg("-netdev")
        .arg(format!(
            "socket,id=n0,udp=127.0.0.1:{},localaddr=127.0.0.1:{}",
            ports.1, ports.0
        ))
        .arg("-device")
        .arg(format!("virtio-net-pci,netdev=n0,mac={mac}"))
        // The daemon phase's way to the analyzer on this host: 10.0.2.2 in the guest is
        // this host's loopback (qemu's user network).
        .args(["-netdev", "user,id=n1"])
        .arg("-device")
        .arg(format!(
            "virtio-net-pci,netdev=n1,mac={}",
            mac.replace("52:54:00:77", "52:54:00:78")
        ))
        .arg("-append")
        .arg(format!(
            "root=/dev/vda rw console=ttyS0 quiet loglevel=3 init=/opt/test.sh panic=-1 \
             {role_args}"
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| fail(format!("qemu-system-x86_64 ({name}): {e}")));
    Vm { name, child, log }
}

/// Waits for both VMs to power off; the serial logs.
fn wait_all(vms: &mut [Vm], deadline: Instant) -> Vec<String> {
    loop {
        let mut running = 0;
        for vm in vms.iter_mut() {
            match vm.child.try_wait() {
                Ok(Some(_)) => {}
                Ok(None) => running += 1,
                Err(e) => fail(format!("{}: {e}", vm.name)),
            }
        }
        if running == 0 {
            break;
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = vms
                .iter()
                .map(|vm| {
                    let text = fs::read_to_string(&vm.log).unwrap_or_default();
                    let tail: Vec<&str> = text.lines().rev().take(25).collect();
                    format!(
                        "--- {} (last lines)\n{}",
                        vm.name,
                        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                    )
                })
                .collect();
            fail(format!(
                "the VMs did not power off within {VM_DEADLINE:?}\n{}",
                logs.join("\n")
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    vms.iter_mut()
        .map(|vm| {
            let mut err = String::new();
            if let Some(mut stderr) = vm.child.stderr.take() {
                let _ = stderr.read_to_string(&mut err);
            }
            let log = fs::read_to_string(&vm.log)
                .unwrap_or_else(|e| fail(format!("{}: {e}", vm.log.display())));
            if !log.contains("HM end") {
                fail(format!(
                    "{} did not finish its script; qemu said: {err}\n--- serial log\n{log}",
                    vm.name
                ));
            }
            log
        })
        .collect()
}

/// The `HM <tag> ...` lines of a log, without the tag, carriage returns removed.
fn lines<'a>(log: &'a str, tag: &str) -> Vec<&'a str> {
    let prefix = format!("HM {tag} ");
    log.lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter_map(|l| l.find(&prefix).map(|at| &l[at + prefix.len()..]))
        .collect()
}

/// The value of `key=` in a line of `key=value` words.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let prefix = format!("{key}=");
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&prefix))
}

fn number(line: &str, key: &str) -> u64 {
    let text = field(line, key).unwrap_or_else(|| fail(format!("no {key}= in {line:?}")));
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.unwrap_or_else(|e| fail(format!("{key}={text} in {line:?}: {e}")))
}

/// Source ports of the RoCEv2 packets `from` sent, in tcpdump's `-nn -q` lines
/// (`IP 10.77.0.1.49153 > 10.77.0.2.4791: UDP, length 86`).
fn wire_ports(dump: &[&str], from: &str) -> Vec<u16> {
    dump.iter()
        .filter_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let at = words.iter().position(|w| *w == "IP")?;
            let src = words.get(at + 1)?;
            let (ip, port) = src.rsplit_once('.')?;
            (ip == from).then(|| port.parse().ok()).flatten()
        })
        .collect()
}

/// The QPN in an `ibv_rc_pingpong` address line (`local address:  LID 0x0000, QPN
/// 0x000011, PSN 0x..., GID ::ffff:10.77.0.1`).
fn pingpong_qpn(rc: &[&str], which: &str) -> u32 {
    let line = rc.iter().find(|l| l.contains(which)).unwrap_or_else(|| {
        fail(format!(
            "no {which:?} line in ibv_rc_pingpong output {rc:?}"
        ))
    });
    let qpn = line
        .split("QPN ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| fail(format!("no QPN in {line:?}")));
    u32::from_str_radix(qpn.trim().trim_start_matches("0x"), 16)
        .unwrap_or_else(|e| fail(format!("QPN {qpn} in {line:?}: {e}")))
}

/// The lab's fabric: the two VMs (`vm0` the prober's, `vm1` the responder's) under one ToR.
fn lab_topology() -> FabricTopology {
    let node = |id: u32, name: &str, kind, ipv4| NodeDesc {
        id,
        name: name.into(),
        kind,
        tier: (kind == NodeKind::Switch).then_some(0),
        ipv4,
    };
    let link = |host: u32, port: u16| LinkDesc {
        a: PortRef {
            node: host,
            port: 0,
        },
        b: PortRef { node: 0, port },
        gbps: 10.0,
        delay_ns: 1_000,
    };
    let topology = FabricTopology {
        nodes: vec![
            node(0, "tor0", NodeKind::Switch, None),
            node(1, "vm0", NodeKind::Host, Some([10, 77, 0, 1])),
            node(2, "vm1", NodeKind::Host, Some([10, 77, 0, 2])),
        ],
        links: vec![link(1, 0), link(2, 1)],
    };
    topology
        .validate()
        .unwrap_or_else(|e| fail(format!("the lab fabric: {e}")));
    topology
}

fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| fail(format!("a free TCP port: {e}")))
}

#[test]
fn ud_probes_and_both_acks_cross_soft_roce_between_two_vms() {
    let started = Instant::now();
    // Root: the effective uid of this process.
    let uid = fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(str::to_string))
        })
        .unwrap_or_default();
    if uid != "0" {
        fail(format!(
            "needs root (debootstrap, mkfs), effective uid is {uid:?}"
        ));
    }
    for program in ["qemu-system-x86_64", "debootstrap", "mkfs.ext4"] {
        if !have(program) {
            fail(format!(
                "{program} is not installed (Debian: qemu-system-x86, debootstrap, e2fsprogs; \
                 .ci/run installs them)"
            ));
        }
    }
    let work = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("verbs-vm");
    fs::create_dir_all(&work).unwrap_or_else(|e| fail(format!("{}: {e}", work.display())));
    let root = rootfs(&work);
    let rootfs_s = started.elapsed().as_secs_f64();

    // The program and the init script into the image.
    let opt = root.join("opt");
    fs::create_dir_all(&opt).unwrap_or_else(|e| fail(format!("{}: {e}", opt.display())));
    let binary = opt.join("hawkmesh-verbs-probe");
    fs::copy(env!("CARGO_BIN_EXE_hawkmesh-verbs-probe"), &binary)
        .unwrap_or_else(|e| fail(format!("copying the probe program: {e}")));
    let tracer = opt.join("hawkmesh-qp-trace");
    fs::copy(env!("CARGO_BIN_EXE_hawkmesh-qp-trace"), &tracer)
        .unwrap_or_else(|e| fail(format!("copying the tracer: {e}")));
    // The daemon phase's analyzer (mutual TLS, as in production) and the VMs' certificates.
    let pki_dir = work.join("pki");
    let _ = fs::remove_dir_all(&pki_dir);
    let pki = Pki::create(&pki_dir, "hawkmesh VM lab CA")
        .unwrap_or_else(|e| fail(format!("the lab CA: {e}")));
    pki.issue("analyzer", &["analyzer.lab".to_string()])
        .unwrap_or_else(|e| fail(format!("the analyzer's certificate: {e}")));
    let guest_pki = opt.join("pki");
    let _ = fs::remove_dir_all(&guest_pki);
    fs::create_dir_all(&guest_pki).unwrap_or_else(|e| fail(format!("{e}")));
    fs::copy(pki.cert_path("ca"), guest_pki.join("ca.pem"))
        .unwrap_or_else(|e| fail(format!("copying the CA: {e}")));
    for host in ["vm0", "vm1"] {
        pki.issue(host, &[])
            .unwrap_or_else(|e| fail(format!("{host}'s certificate: {e}")));
        fs::copy(pki.cert_path(host), guest_pki.join(format!("{host}.pem")))
            .and_then(|_| {
                fs::copy(
                    pki.key_path(host),
                    guest_pki.join(format!("{host}-key.pem")),
                )
            })
            .unwrap_or_else(|e| fail(format!("copying {host}'s certificate: {e}")));
    }
    let analyzer_port = free_tcp_port();
    let mut server_config = ServerConfig::loopback(
        lab_topology(),
        work.join("analyzer"),
        SocketAddr::from(([127, 0, 0, 1], analyzer_port)),
    );
    let _ = fs::remove_dir_all(work.join("analyzer"));
    server_config.tls = TlsMode::Mutual {
        cert: pki.cert_path("analyzer"),
        key: pki.key_path("analyzer"),
        client_ca: pki.cert_path("ca"),
    };
    server_config.pingmesh = Some(PingmeshConfig {
        upload_interval_ms: 1_000,
        pinglist_refresh_ms: 2_000,
        probe_timeout_ms: 2_000,
        ..PingmeshConfig::default()
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap_or_else(|e| fail(format!("the analyzer's runtime: {e}")));
    let server = runtime
        .block_on(start(server_config))
        .unwrap_or_else(|e| fail(format!("the analyzer: {e}")));
    let script = opt.join("test.sh");
    fs::write(&script, GUEST_SCRIPT).unwrap_or_else(|e| fail(format!("{e}")));
    for path in [&binary, &tracer, &script] {
        fs::set_permissions(path, fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| fail(format!("{}: {e}", path.display())));
    }
    let image = work.join("root.img");
    let _ = fs::remove_file(&image);
    run(
        Command::new("mkfs.ext4")
            .args(["-q", "-F", "-d"])
            .arg(&root)
            .arg(&image)
            .arg("1500M"),
        "mkfs.ext4 -d",
    );
    let image_s = started.elapsed().as_secs_f64();

    let (port_a, port_b) = (free_udp_port(), free_udp_port());
    let ports: String = SRC_PORTS
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let boot_start = Instant::now();
    let mut vms = vec![
        boot(
            "responder",
            &work,
            &root,
            &image,
            (port_b, port_a),
            "52:54:00:77:00:02",
            &format!(
                "hm_role=respond hm_ip={RESPONDER_IP} hm_peer={PROBER_IP} \
                 hm_flow={RC_FLOW_LABEL:#x} hm_host=vm1 hm_aport={analyzer_port} \
                 hm_flow2={SERVICE_FLOW_LABEL:#x}"
            ),
        ),
        boot(
            "prober",
            &work,
            &root,
            &image,
            (port_a, port_b),
            "52:54:00:77:00:01",
            &format!(
                "hm_role=probe hm_ip={PROBER_IP} hm_peer={RESPONDER_IP} hm_probes={PROBES} \
                 hm_ports={ports} hm_flow={RC_FLOW_LABEL:#x} hm_netem={NETEM_DELAY_MS} \
                 hm_netem_probes={NETEM_PROBES} hm_netem_port={NETEM_PORT} hm_host=vm0 \
                 hm_aport={analyzer_port} hm_flow2={SERVICE_FLOW_LABEL:#x}"
            ),
        ),
    ];
    let logs = wait_all(&mut vms, boot_start + VM_DEADLINE);
    let vms_s = boot_start.elapsed().as_secs_f64();
    let (responder, prober_all) = (&logs[0], &logs[1]);
    // The prober's first run, and its netem run.
    let (prober, netem_run) = match prober_all.split_once("HM netem on") {
        Some((first, rest)) => match rest.split_once("HM netem off") {
            Some((netem, _)) => (first, netem),
            None => fail(format!("no `HM netem off` line\n{prober_all}")),
        },
        None => fail(format!("no `HM netem on` line\n{prober_all}")),
    };
    let context = || format!("--- prober\n{prober_all}\n--- responder\n{responder}");

    for (name, log) in [("prober", prober_all.as_str()), ("responder", responder)] {
        if let Some(error) = lines(log, "error").first() {
            fail(format!("{name}: {error}\n{}", context()));
        }
    }
    // Boot: the kernel's uptime when the script started, and when rxe was up.
    let up = |log: &str, tag: &str| -> f64 {
        lines(log, tag)
            .first()
            .and_then(|l| field(l, "uptime"))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| fail(format!("no `HM {tag} uptime=` line\n{}", context())))
    };

    // 1. Both sides ran on rxe, detected that it has no completion timestamps, and said so.
    let prober_local = lines(prober, "local");
    let responder_local = lines(responder, "local");
    assert_eq!(prober_local.len(), 1, "{}", context());
    assert_eq!(responder_local.len(), 1, "{}", context());
    for (name, log) in [("prober", prober), ("responder", responder)] {
        let clock = lines(log, "clock");
        assert_eq!(clock.len(), 1, "{name}: {}", context());
        assert!(
            clock[0].starts_with("host clock (rxe0 has no completion timestamps"),
            "{name} clock line: {:?}",
            clock[0]
        );
    }
    let prober_qpn = number(prober_local[0], "qpn") as u32;
    let responder_qpn = number(responder_local[0], "qpn") as u32;
    assert_eq!(field(prober_local[0], "device"), Some("rxe0"));
    assert_eq!(
        field(prober_local[0], "addr"),
        Some(format!("{PROBER_IP}/qp{prober_qpn:#x}").as_str())
    );
    assert_eq!(field(prober_local[0], "mtu"), Some("1024"));
    // Probes go inline (rxe grants the 128 bytes asked for).
    assert!(
        number(prober_local[0], "inline") >= 50,
        "{}",
        prober_local[0]
    );
    // The real device's refusals, before anything was sent, naming the place.
    let refused = lines(prober, "refused");
    assert_eq!(refused.len(), 2, "{}", context());
    assert_eq!(
        refused[0],
        format!(
            "source port of a send to {RESPONDER_IP}/qp{responder_qpn:#x}: 4791 is not a \
             RoCEv2 source port (flow labels give 49152..=65535)"
        )
    );
    assert_eq!(
        refused[1],
        format!(
            "payload of a send to {RESPONDER_IP}/qp{responder_qpn:#x}: 1025 bytes exceed the \
             port's MTU of 1024 (a UD message is one packet)"
        )
    );

    // 2. Every probe answered with both ACKs, every result on host clocks at both ends.
    let results = lines(prober, "result");
    assert_eq!(results.len(), PROBES, "{}", context());
    let mut rtts = Vec::new();
    for r in &results {
        assert_eq!(field(r, "outcome"), Some("answered"), "{r}\n{}", context());
        assert_eq!(field(r, "prober_clock"), Some("Some(HostClock)"), "{r}");
        assert_eq!(field(r, "responder_clock"), Some("Some(HostClock)"), "{r}");
        assert_eq!(field(r, "hw"), Some("false"), "{r}");
        rtts.push(number(r, "rtt_ns"));
    }
    let responder_summary = lines(responder, "responder");
    assert_eq!(responder_summary.len(), 1, "{}", context());
    let all_probes = (PROBES + NETEM_PROBES) as u64;
    assert_eq!(number(responder_summary[0], "acks"), all_probes);
    assert_eq!(number(responder_summary[0], "delay_acks"), all_probes);
    assert_eq!(field(responder_summary[0], "done"), Some("true"));

    // 3. Source ports: each probe's carried port is its target's; the responder read it
    //    from the payload and both ACKs left on it and carried it back.
    let prober_tx = lines(prober, "tx");
    let prober_rx = lines(prober, "rx");
    // The responder's lines of the first run (the netem run used its own port).
    let first_run = |l: &&str| field(l, "payload_src_port") != Some(&NETEM_PORT.to_string());
    let responder_rx: Vec<&str> = lines(responder, "rx")
        .into_iter()
        .filter(first_run)
        .collect();
    let responder_tx: Vec<&str> = lines(responder, "tx")
        .into_iter()
        .filter(first_run)
        .collect();
    for seq in 0..PROBES as u64 {
        let pick = |set: &[&str], kind: &str| -> Vec<u64> {
            set.iter()
                .filter(|l| {
                    field(l, "kind") == Some(kind) && field(l, "seq") == Some(&seq.to_string())
                })
                .map(|l| {
                    let transport = number(l, "src_port");
                    let payload = number(l, "payload_src_port");
                    assert_eq!(transport, payload, "transport and payload disagree: {l}");
                    payload
                })
                .collect()
        };
        let sent = pick(&prober_tx, "probe");
        assert_eq!(sent.len(), 1, "probe {seq} sent once: {}", context());
        let port = sent[0];
        assert_eq!(port, u64::from(SRC_PORTS[seq as usize % SRC_PORTS.len()]));
        assert_eq!(
            pick(&responder_rx, "probe"),
            [port],
            "probe {seq} at the responder"
        );
        assert_eq!(pick(&responder_tx, "ack"), [port], "ACK {seq} sent");
        assert_eq!(
            pick(&responder_tx, "delay-ack"),
            [port],
            "delay ACK {seq} sent"
        );
        assert_eq!(pick(&prober_rx, "ack"), [port], "ACK {seq} received");
        assert_eq!(
            pick(&prober_rx, "delay-ack"),
            [port],
            "delay ACK {seq} received"
        );
    }
    // Every reception came from the other side's QP and said host clock.
    for l in prober_rx.iter().chain(&responder_rx) {
        assert_eq!(field(l, "clock"), Some("HostClock"), "{l}");
    }
    assert!(
        prober_rx
            .iter()
            .all(|l| field(l, "from")
                == Some(format!("{RESPONDER_IP}/qp{responder_qpn:#x}").as_str()))
    );
    assert!(responder_rx
        .iter()
        .all(|l| field(l, "from") == Some(format!("{PROBER_IP}/qp{prober_qpn:#x}").as_str())));

    // The netem run: every probe answered, each RTT at least the added delay (② is read
    // before the probe leaves, ⑤ after the ACK came, ③ after the probe came and ④ before
    // the ACK left, so (⑤−②) − (④−③) holds the whole delay), and not far above the
    // first run's.
    let netem_results = lines(netem_run, "result");
    assert_eq!(netem_results.len(), NETEM_PROBES, "{}", context());
    let mut netem_rtts = Vec::new();
    for r in &netem_results {
        assert_eq!(field(r, "outcome"), Some("answered"), "{r}\n{}", context());
        assert_eq!(number(r, "src_port"), u64::from(NETEM_PORT), "{r}");
        netem_rtts.push(number(r, "rtt_ns"));
    }
    netem_rtts.sort_unstable();
    let mut base_rtts = rtts.clone();
    base_rtts.sort_unstable();
    let delay_ns = NETEM_DELAY_MS * 1_000_000;
    assert!(
        netem_rtts[0] >= delay_ns,
        "netem {NETEM_DELAY_MS} ms: RTTs {netem_rtts:?}"
    );
    let (base_median, netem_median) = (
        base_rtts[base_rtts.len() / 2],
        netem_rtts[netem_rtts.len() / 2],
    );
    assert!(
        netem_median <= base_median + delay_ns + 60_000_000,
        "netem {NETEM_DELAY_MS} ms: median {netem_median} ns against {base_median} ns without"
    );

    // 4. The wire: rxe sends a UD QP's packets from one port derived from its QPN, whatever
    //    the address handle's flow label asks for (docs/verbs-transport.md).
    let ud = lines(prober, "wire-ud");
    let from_prober = wire_ports(&ud, PROBER_IP);
    let from_responder = wire_ports(&ud, RESPONDER_IP);
    assert_eq!(from_prober.len(), PROBES, "probes on the wire: {ud:?}");
    assert_eq!(from_responder.len(), 2 * PROBES, "ACKs on the wire: {ud:?}");
    let prober_port = rxe_ud_source_port(prober_qpn);
    let responder_port = rxe_ud_source_port(responder_qpn);
    assert!(
        from_prober.iter().all(|p| *p == prober_port),
        "{from_prober:?} vs {prober_port}"
    );
    assert!(
        from_responder.iter().all(|p| *p == responder_port),
        "{from_responder:?} vs {responder_port}"
    );
    // The ports the flow labels asked for are not what rxe used.
    let asked: Vec<u16> = SRC_PORTS
        .iter()
        .map(|p| {
            flow_label_to_udp_sport(hawkmesh_wire::roce::flow_label_for_udp_sport(*p).unwrap_or(0))
        })
        .collect();
    assert_eq!(asked, SRC_PORTS);
    assert!(SRC_PORTS.iter().any(|p| *p != prober_port));

    // 5. An RC connection (ibv_rc_pingpong, flow label 0): rxe derives the port from both
    //    QPNs, rdma_get_udp_sport (the symmetric label of wire::roce::udp_sport), each way.
    let rc = lines(prober_all, "rc");
    let rc_wire = lines(prober_all, "wire-rc");
    let local = pingpong_qpn(&rc, "local address");
    let remote = pingpong_qpn(&rc, "remote address");
    let expected = udp_sport(0, local, remote);
    let rc_from_prober = wire_ports(&rc_wire, PROBER_IP);
    let rc_from_responder = wire_ports(&rc_wire, RESPONDER_IP);
    assert!(
        !rc_from_prober.is_empty() && !rc_from_responder.is_empty(),
        "{rc_wire:?}\n{rc:?}"
    );
    assert!(
        rc_from_prober.iter().chain(&rc_from_responder).all(|p| *p == expected),
        "RC QPNs {local:#x}/{remote:#x}: expected source port {expected}, wire {rc_from_prober:?} / {rc_from_responder:?}"
    );
    let responder_rc = lines(responder, "rc");
    assert!(
        responder_rc.iter().any(|l| l.contains("bytes in")),
        "the RC server side finished: {}",
        context()
    );

    // 6. An RC connection whose QPs both set flow label 0x1234 (verbs::RcConnection): rxe
    //    honours a connected QP's label (unlike a UD address handle's), so both ends' packets
    //    leave from flow_label_to_udp_sport(0x1234) = 0xD234, not the QPN-derived port.
    let fl = lines(prober_all, "rc-fl");
    let fl_responder = lines(responder, "rc-fl");
    assert_eq!((fl.len(), fl_responder.len()), (1, 1), "{}", context());
    assert!(
        fl[0].ends_with("received=\"hawkmesh rc pong\""),
        "{}",
        fl[0]
    );
    assert!(
        fl_responder[0].ends_with("received=\"hawkmesh rc ping\""),
        "{}",
        fl_responder[0]
    );
    let fl_local = number(fl[0], "local_qpn") as u32;
    let fl_remote = number(fl[0], "remote_qpn") as u32;
    assert_eq!(number(fl[0], "flow_label"), u64::from(RC_FLOW_LABEL));
    assert_eq!(
        (
            number(fl_responder[0], "local_qpn") as u32,
            number(fl_responder[0], "remote_qpn") as u32
        ),
        (fl_remote, fl_local)
    );
    let labelled = flow_label_to_udp_sport(RC_FLOW_LABEL);
    assert_eq!(labelled, 0xD234);
    let fl_wire = lines(prober_all, "wire-fl");
    let fl_from_prober = wire_ports(&fl_wire, PROBER_IP);
    let fl_from_responder = wire_ports(&fl_wire, RESPONDER_IP);
    assert!(
        !fl_from_prober.is_empty() && !fl_from_responder.is_empty(),
        "{fl_wire:?}"
    );
    assert!(
        fl_from_prober
            .iter()
            .chain(&fl_from_responder)
            .all(|p| *p == labelled),
        "flow label {RC_FLOW_LABEL:#x}: expected source port {labelled}, wire {fl_from_prober:?} \
         / {fl_from_responder:?} (QPN-derived: {})",
        udp_sport(0, fl_local, fl_remote)
    );
    assert_ne!(udp_sport(0, fl_local, fl_remote), labelled);

    // 7. The eBPF service tracer in the responder's VM (aya, kprobes on the kernel verbs,
    //    offsets from ib_core's BTF) saw both RC connections made, with their flow labels
    //    and the ports the wire shows, and destroyed.
    assert!(
        lines(responder, "trace-error").is_empty(),
        "the tracer could not run: {}",
        context()
    );
    assert_eq!(lines(responder, "trace ready").len(), 1, "{}", context());
    let server_qpn = pingpong_qpn(&responder_rc, "local address");
    let client_qpn = pingpong_qpn(&responder_rc, "remote address");
    assert_eq!((server_qpn, client_qpn), (remote, local));
    let mut connects = lines(responder, "trace connect");
    connects.sort_unstable();
    let mut wanted = vec![
        format!(
            "qpn={server_qpn:#x} dest_qpn={client_qpn:#x} dgid=::ffff:{PROBER_IP} \
             flow_label=0x0 src_port={expected} local={RESPONDER_IP} remote={PROBER_IP}"
        ),
        format!(
            "qpn={fl_remote:#x} dest_qpn={fl_local:#x} dgid=::ffff:{PROBER_IP} \
             flow_label={RC_FLOW_LABEL:#x} src_port={labelled} local={RESPONDER_IP} \
             remote={PROBER_IP}"
        ),
    ];
    wanted.sort_unstable();
    assert_eq!(connects, wanted, "{}", context());
    for qpn in [server_qpn, fl_remote] {
        assert!(
            lines(responder, "trace destroy")
                .iter()
                .any(|l| *l == format!("qpn={qpn:#x}")),
            "no destroy of QP {qpn:#x}: {}",
            context()
        );
    }

    // 8. The daemon phase: `hawkmesh host-agent`'s daemon on both VMs with the verbs
    //    transport registered its UD queue pair (not a derived QPN), probed the other's,
    //    uploaded results that say host clock on both ends, and traced the RC connection its
    //    eBPF source saw opened, on that connection's 5-tuple.
    for (name, log) in [("prober", prober_all.as_str()), ("responder", responder)] {
        if let Some(error) = lines(log, "d3-error").first() {
            fail(format!("{name}'s daemon phase: {error}\n{}", context()));
        }
    }
    let controller = server
        .pingmesh
        .clone()
        .unwrap_or_else(|| fail("the analyzer runs no pingmesh controller"));
    let registered = |host: &str, ip: &str| -> u32 {
        let reply = controller
            .lock()
            .expect("the controller")
            .comm_info(&pb::CommInfoRequest {
                host: host.into(),
                ips: vec![ip.into()],
            })
            .unwrap_or_else(|e| fail(format!("comm info of {ip}: {e:?}\n{}", context())));
        reply
            .targets
            .first()
            .map(|t| t.qpn)
            .unwrap_or_else(|| fail(format!("{ip} not registered: {reply:?}\n{}", context())))
    };
    let service_port = flow_label_to_udp_sport(SERVICE_FLOW_LABEL);
    let mut daemon_rtts = Vec::new();
    let mut service_answered = [0usize; 2];
    for (side, (log, peer, peer_ip)) in [
        (prober_all.as_str(), "vm1", RESPONDER_IP),
        (responder.as_str(), "vm0", PROBER_IP),
    ]
    .into_iter()
    .enumerate()
    {
        let own = if side == 0 { "vm0" } else { "vm1" };
        let peer_qpn = registered(own, peer_ip);
        assert_ne!(
            peer_qpn,
            qpn_of(1, 1),
            "{peer} registered a derived QPN, not its UD QP's"
        );
        let results = lines(log, "d3-result");
        let answered: Vec<&&str> = results
            .iter()
            .filter(|r| {
                field(r, "status") == Some("1") && field(r, "target") == Some(&format!("{peer}:0"))
            })
            .collect();
        assert!(
            answered.len() >= 5,
            "{own}: {} answered of {} results\n{}",
            answered.len(),
            results.len(),
            context()
        );
        for r in &answered {
            // Answered on the peer's registered queue pair, measured on host clocks (rxe
            // has no completion timestamps), both ends saying so.
            assert_eq!(number(r, "target_qpn") as u32, peer_qpn, "{r}");
            assert_eq!(field(r, "prober_clock"), Some("3"), "{r}");
            assert_eq!(field(r, "responder_clock"), Some("3"), "{r}");
            if field(r, "kind") == Some("1") {
                daemon_rtts.push(number(r, "network_rtt_ns"));
            }
        }
        service_answered[side] = answered
            .iter()
            .filter(|r| {
                field(r, "kind") == Some("3") && number(r, "src_port") == u64::from(service_port)
            })
            .count();
        assert!(
            service_answered[side] >= 3,
            "{own}: service tracing of the RC connection with flow label \
             {SERVICE_FLOW_LABEL:#x} (source port {service_port}): {} answered\n{}",
            service_answered[side],
            context()
        );
        let summary = lines(log, "d3-daemon-summary");
        assert_eq!(summary.len(), 1, "{own}: {}", context());
        assert_eq!(
            number(summary[0], "undelivered"),
            0,
            "{own}: {}",
            summary[0]
        );
        assert!(number(summary[0], "delivered") >= answered.len() as u64);
    }
    let status = controller.lock().expect("the controller").status();
    assert_eq!(status.hosts_registered, 2, "{status:?}");
    daemon_rtts.sort_unstable();
    runtime.block_on(server.stop());

    rtts.sort_unstable();
    eprintln!(
        "verbs VM lab: rootfs {rootfs_s:.1} s, image {:.1} s, VMs {vms_s:.1} s (script start at \
         uptime {:.1}/{:.1} s, rxe up at {:.1}/{:.1} s, tracer loaded at {:.1} s); probe RTT through rxe (host clocks, \
         TCG) min {} µs, median {} µs, max {} µs; UD source ports on the wire {prober_port} \
         (prober QP {prober_qpn:#x}) and {responder_port} (responder QP {responder_qpn:#x}), \
         asked {SRC_PORTS:?}; with netem {NETEM_DELAY_MS} ms median RTT {} µs (min {} µs); RC QPs {local:#x}/{remote:#x} on port {expected}, RC with flow \
         label {RC_FLOW_LABEL:#x} on port {labelled}; daemon phase: {} ToR-mesh RTTs (median {} µs), service-tracing probes answered {service_answered:?}; total {:.1} s",
        image_s - rootfs_s,
        up(prober, "up"),
        up(responder, "up"),
        up(prober, "rxe"),
        up(responder, "rxe"),
        up(responder, "tracer"),
        rtts[0] / 1_000,
        rtts[rtts.len() / 2] / 1_000,
        rtts[rtts.len() - 1] / 1_000,
        netem_median / 1_000,
        netem_rtts[0] / 1_000,
        daemon_rtts.len(),
        daemon_rtts.get(daemon_rtts.len() / 2).copied().unwrap_or(0) / 1_000,
        started.elapsed().as_secs_f64()
    );
}
