//! Shortest-path ECMP routing tables and the ECMP hash.
//!
//! Every switch gets, for every destination NIC, the set of its ports that lie on a shortest
//! path (hosts never transit traffic), like the reference's BFS routing. Static overrides
//! replace individual entries (e.g. to build a routing loop).

use std::collections::VecDeque;

/// Adjacency used by the BFS: per switch, its (local port, neighbour switch) pairs that are
/// up, and the switch + local port where every NIC attaches.
#[derive(Clone, Debug)]
pub struct RoutingGraph {
    /// `switch_links[s]` = (local port on s, neighbour switch index).
    pub switch_links: Vec<Vec<(u16, u32)>>,
    /// `nic_attach[n]` = (switch index, local port on that switch) of NIC n.
    pub nic_attach: Vec<Option<(u32, u16)>>,
}

/// Next-hop port sets for every (switch, destination NIC).
#[derive(Clone, Debug)]
pub struct RoutingTable {
    nics: usize,
    entries: Vec<(u32, u16)>,
    ports: Vec<u16>,
}

impl RoutingTable {
    /// Computes shortest-path ECMP routes.
    pub fn shortest_paths(graph: &RoutingGraph) -> Self {
        let switches = graph.switch_links.len();
        let nics = graph.nic_attach.len();
        let mut table = RoutingTable {
            nics,
            entries: vec![(0, 0); switches * nics],
            ports: Vec::new(),
        };
        // Reverse adjacency: for switch s, who reaches s through which of their ports.
        let mut incoming: Vec<Vec<(u32, u16)>> = vec![Vec::new(); switches];
        for (from, links) in graph.switch_links.iter().enumerate() {
            for (port, to) in links {
                incoming[*to as usize].push((from as u32, *port));
            }
        }
        let mut dist = vec![u32::MAX; switches];
        let mut hops: Vec<Vec<u16>> = vec![Vec::new(); switches];
        let mut queue = VecDeque::new();
        for nic in 0..nics {
            let Some((attach, port)) = graph.nic_attach[nic] else {
                continue;
            };
            dist.iter_mut().for_each(|d| *d = u32::MAX);
            hops.iter_mut().for_each(Vec::clear);
            dist[attach as usize] = 0;
            hops[attach as usize].push(port);
            queue.clear();
            queue.push_back(attach);
            while let Some(s) = queue.pop_front() {
                let d = dist[s as usize];
                for (from, port) in &incoming[s as usize] {
                    let f = *from as usize;
                    if dist[f] == u32::MAX {
                        dist[f] = d + 1;
                        queue.push_back(*from);
                    }
                    if dist[f] == d + 1 {
                        hops[f].push(*port);
                    }
                }
            }
            for (s, ports) in hops.iter_mut().enumerate() {
                ports.sort_unstable();
                ports.dedup();
                table.set(s as u32, nic as u32, ports);
            }
        }
        table
    }

    /// Replaces the next hops of (switch, destination NIC).
    pub fn set(&mut self, switch: u32, nic: u32, ports: &[u16]) {
        let start = self.ports.len() as u32;
        self.ports.extend_from_slice(ports);
        self.entries[switch as usize * self.nics + nic as usize] = (start, ports.len() as u16);
    }

    /// The next-hop ports of (switch, destination NIC); empty when unreachable.
    #[inline]
    pub fn next_hops(&self, switch: u32, nic: u32) -> &[u16] {
        let (start, len) = self.entries[switch as usize * self.nics + nic as usize];
        &self.ports[start as usize..start as usize + len as usize]
    }
}

/// MurmurHash3 (x86, 32-bit) of the 12-byte key (src ip, dst ip, src port | dst port << 16)
/// with a per-switch seed — the ECMP hash of the HPCC reference.
#[inline]
pub fn ecmp_hash(src_ip: [u8; 4], dst_ip: [u8; 4], src_port: u16, dst_port: u16, seed: u32) -> u32 {
    // Addresses as 32-bit numbers (a.b.c.d = a << 24 | ...), as the reference hashes them.
    let words = [
        u32::from_be_bytes(src_ip),
        u32::from_be_bytes(dst_ip),
        src_port as u32 | ((dst_port as u32) << 16),
    ];
    let mut h = seed;
    for word in words {
        let mut k = word.wrapping_mul(0xcc9e_2d51);
        k = k.rotate_left(15);
        k = k.wrapping_mul(0x1b87_3593);
        h ^= k;
        h = h.rotate_left(13);
        h = h.wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    h ^= 12;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur3_reference_vectors() {
        // Published vector: MurmurHash3_x86_32("Hello, world!", 1234) = 0xfaf6cdb3.
        assert_eq!(ecmp_hash_reference(b"Hello, world!", 1234), 0xfaf6_cdb3);
        assert_eq!(
            ecmp_hash([0; 4], [0; 4], 0, 0, 0),
            ecmp_hash_reference(&[0; 12], 0)
        );
        let key = [1u8, 0, 0, 0, 2, 0, 0, 0, 3, 0, 4, 0];
        assert_eq!(
            ecmp_hash([0, 0, 0, 1], [0, 0, 0, 2], 3, 4, 7),
            ecmp_hash_reference(&key, 7)
        );
    }

    /// Byte-wise MurmurHash3_x86_32 written from the published algorithm, for cross-checking.
    fn ecmp_hash_reference(key: &[u8], seed: u32) -> u32 {
        let mut h = seed;
        let blocks = key.len() / 4;
        for chunk in key[..blocks * 4].chunks(4) {
            let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
            k = k
                .wrapping_mul(0xcc9e2d51)
                .rotate_left(15)
                .wrapping_mul(0x1b873593);
            h ^= k;
            h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe6546b64);
        }
        let tail = &key[blocks * 4..];
        if !tail.is_empty() {
            let mut k = 0u32;
            for (i, b) in tail.iter().enumerate() {
                k |= (*b as u32) << (8 * i);
            }
            h ^= k
                .wrapping_mul(0xcc9e2d51)
                .rotate_left(15)
                .wrapping_mul(0x1b873593);
        }
        h ^= key.len() as u32;
        h ^= h >> 16;
        h = h.wrapping_mul(0x85ebca6b);
        h ^= h >> 13;
        h = h.wrapping_mul(0xc2b2ae35);
        h ^ (h >> 16)
    }

    #[test]
    fn diamond_has_two_equal_cost_paths() {
        // s0 - s1 - s3, s0 - s2 - s3; NIC 0 on s3 port 5.
        let graph = RoutingGraph {
            switch_links: vec![
                vec![(0, 1), (1, 2)],
                vec![(0, 0), (1, 3)],
                vec![(0, 0), (1, 3)],
                vec![(0, 1), (1, 2)],
            ],
            nic_attach: vec![Some((3, 5))],
        };
        let table = RoutingTable::shortest_paths(&graph);
        assert_eq!(table.next_hops(0, 0), &[0, 1]);
        assert_eq!(table.next_hops(1, 0), &[1]);
        assert_eq!(table.next_hops(3, 0), &[5]);
        let mut table = table;
        table.set(1, 0, &[0]);
        assert_eq!(table.next_hops(1, 0), &[0]);
    }
}
