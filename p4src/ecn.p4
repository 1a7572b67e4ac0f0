/* ecntune — RED/ECN marking against register-held per-port thresholds, with telemetry.
 *
 *   ingress: control packets from the CPU port (threshold writes, telemetry interval),
 *            IPv4 LPM + ECMP (action selector), MAC rewrite, TTL, drops counted by reason,
 *            queue-byte accounting on enqueue, one telemetry digest per active port and
 *            interval (digests can only be sent from ingress in v1model);
 *   egress:  queue-byte accounting on dequeue, RED/ECN marking on the bytes left in the
 *            queue when the packet departs (as DCQCN/HPCC switches mark), per-port counters.
 *
 * p4src/README.md explains every choice; p4src/encoding.py is the Python side of every
 * number format used here.
 */
#include <core.p4>
#include <v1model.p4>
#include "headers.p4"

// ---- state shared by ingress and egress, indexed by egress port ------------------------------

register<bit<32>>(N_PORTS) ecn_kmin;        // bytes
register<bit<32>>(N_PORTS) ecn_kmax;        // bytes; 0 = marking disabled (the reset value)
register<bit<64>>(N_PORTS) ecn_slope;       // floor(pmax * 2^32 / (kmax - kmin))
register<bit<16>>(N_PORTS) ecn_pmax;        // basis points, for telemetry only
register<bit<48>>(1) telemetry_interval_us; // 0 = DEFAULT_INTERVAL_US

register<bit<32>>(N_PORTS) queue_bytes;     // bytes enqueued minus bytes dequeued
register<bit<32>>(N_PORTS) queue_counted;   // packets counted into queue_bytes (wraps)

register<bit<48>>(N_PORTS) tel_start_us;
register<bit<32>>(N_PORTS) tel_tx_bytes;
register<bit<32>>(N_PORTS) tel_tx_pkts;
register<bit<32>>(N_PORTS) tel_marked_bytes;
register<bit<32>>(N_PORTS) tel_marked_pkts;
register<bit<64>>(N_PORTS) tel_qdepth_sum;
register<bit<32>>(N_PORTS) tel_qdepth_samples;
register<bit<32>>(N_PORTS) tel_qdepth_max;
register<bit<64>>(N_PORTS) tel_senders;     // 64-bit linear-counting sketch of source IPs
register<bit<32>>(N_PORTS) tel_elephant_bytes;

register<bit<32>>(FLOW_SLOTS) flow_tag;     // which flow owns the slot (a second hash)
register<bit<32>>(FLOW_SLOTS) flow_bytes;   // bytes seen from that flow so far

// ---- the in-switch policy's arithmetic ---------------------------------------------------------

// 16·log2(x) rounded down to a sixteenth, from x's leading one and the 4 bits below it
// (log2(1 + m) read as m: at most 1.4 sixteenths low); 0 for x = 0 and x = 1. Shifts and
// compares only: the data plane has no division. agent/features.py `log2_16` is the same.
bit<16> log2_16(in bit<64> x) {
    bit<64> v = x;
    bit<16> e = 63;
    if (v & 0xFFFFFFFF00000000 == 0) { e = e - 32; v = v << 32; }
    if (v & 0xFFFF000000000000 == 0) { e = e - 16; v = v << 16; }
    if (v & 0xFF00000000000000 == 0) { e = e - 8; v = v << 8; }
    if (v & 0xF000000000000000 == 0) { e = e - 4; v = v << 4; }
    if (v & 0xC000000000000000 == 0) { e = e - 2; v = v << 2; }
    if (v & 0x8000000000000000 == 0) { e = e - 1; v = v << 1; }
    return (e << 4) | ((bit<16>) (v >> 59) & 15);
}

// base + log_num - log_den - offset clamped to one byte (0 where the numerator is 0): the
// log scale of a ratio without dividing.
bit<8> log_key(in bit<16> base, in bool zero, in bit<16> log_num, in bit<16> log_den,
               in bit<16> offset) {
    bit<16> up = base + log_num;
    bit<16> down = log_den + offset;
    return zero || up <= down ? 8w0 : (up - down < 255 ? (bit<8>) (up - down) : 8w255);
}

// ---- parser -------------------------------------------------------------------------------

parser EcnParser(packet_in pkt, out headers_t hdr, inout metadata_t meta,
                 inout standard_metadata_t sm) {
    state start {
        transition select(sm.ingress_port) {
            CPU_PORT: parse_packet_out;
            default: parse_ethernet;
        }
    }
    state parse_packet_out {
        pkt.extract(hdr.packet_out);
        transition select(hdr.packet_out.opcode) {
            OP_FORWARD: parse_ethernet;
            default: parse_ecn_config;
        }
    }
    state parse_ecn_config {
        pkt.extract(hdr.ecn_config);
        transition accept;
    }
    state parse_ethernet {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }
    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        transition select(hdr.ipv4.ihl, hdr.ipv4.frag_offset, hdr.ipv4.protocol) {
            (5, 0, PROTO_TCP): parse_tcp;
            (5, 0, PROTO_UDP): parse_udp;
            default: accept;
        }
    }
    state parse_tcp {
        pkt.extract(hdr.tcp);
        meta.l4_src_port = hdr.tcp.src_port;
        meta.l4_dst_port = hdr.tcp.dst_port;
        transition accept;
    }
    state parse_udp {
        pkt.extract(hdr.udp);
        meta.l4_src_port = hdr.udp.src_port;
        meta.l4_dst_port = hdr.udp.dst_port;
        transition accept;
    }
}

control EcnVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        verify_checksum(hdr.ipv4.isValid() && hdr.ipv4.ihl == 5,
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn, hdr.ipv4.total_len,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
    }
}

// ---- ingress ------------------------------------------------------------------------------

control EcnIngress(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {
    counter(4, CounterType.packets) drops;
    action_selector(HashAlgorithm.crc16, 1024, 16) ecmp_selector;

    action drop(bit<32> reason) {
        mark_to_drop(sm);
        drops.count(reason);
    }

    action forward(bit<9> port, mac_t src_mac, mac_t dst_mac) {
        sm.egress_spec = port;
        hdr.ethernet.src_addr = src_mac;
        hdr.ethernet.dst_addr = dst_mac;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }

    table ipv4_lpm {
        key = {
            hdr.ipv4.dst_addr: lpm;
            hdr.ipv4.src_addr: selector;
            hdr.ipv4.dst_addr: selector;
            hdr.ipv4.protocol: selector;
            meta.l4_src_port: selector;
            meta.l4_dst_port: selector;
        }
        actions = { forward; NoAction; }
        implementation = ecmp_selector;
        size = 1024;
    }

    // Reflect a control packet to the CPU port once it took effect.
    action acknowledge() {
        sm.egress_spec = CPU_PORT;
        hdr.packet_out.setInvalid();
        hdr.packet_in.setValid();
        hdr.packet_in.ingress_port = hdr.ecn_config.port;
        hdr.packet_in.reason = REASON_CONFIG_ACK;
        hdr.packet_in.reserved = 0;
    }

    action write_ecn(bit<32> port, bit<32> kmin, bit<32> kmax, bit<64> slope, bit<16> pmax) {
        ecn_kmin.write(port, kmin);
        ecn_kmax.write(port, kmax);
        ecn_slope.write(port, slope);
        ecn_pmax.write(port, pmax);
    }

    action set_ecn() {
        write_ecn((bit<32>) hdr.ecn_config.port, hdr.ecn_config.kmin, hdr.ecn_config.kmax,
                  hdr.ecn_config.slope, hdr.ecn_config.pmax);
    }

    // The in-switch policy (issue 20; RL-CC §V: a distilled tree, one entry per leaf). The
    // controller installs both tables and may empty them at any time: a port without a
    // class, or keys no entry covers, keeps its thresholds.
    action set_policy_class(bit<8> port_class, bit<16> log2_alpha, bit<16> rate_offset) {
        meta.policy.port_class = port_class;
        meta.policy.log2_alpha = log2_alpha;
        meta.policy.rate_offset = rate_offset;
    }

    table policy_port {
        key = { meta.telemetry.port: exact; }
        actions = { set_policy_class; NoAction; }
        default_action = NoAction();
        size = N_PORTS;
    }

    action decide(bit<32> kmin, bit<32> kmax, bit<64> slope, bit<16> pmax) {
        write_ecn((bit<32>) meta.telemetry.port, kmin, kmax, slope, pmax);
    }

    table policy_tree {
        key = {
            meta.policy.port_class: exact;
            meta.policy.qlen: range;
            meta.policy.tx_rate: range;
            meta.policy.marked_rate: range;
            meta.policy.kmin: range;
            meta.policy.kmax: range;
            meta.policy.pmax: range;
        }
        actions = { decide; NoAction; }
        default_action = NoAction();
        size = 1024;
    }

    action set_interval() {
        telemetry_interval_us.write(0, (bit<48>) hdr.ecn_config.kmin);
    }

    apply {
        if (hdr.packet_out.isValid()) {
            if (hdr.packet_out.opcode == OP_FORWARD) {
                sm.egress_spec = (bit<9>) hdr.packet_out.egress_port;
                hdr.packet_out.setInvalid();
            } else if (!hdr.ecn_config.isValid() || (bit<32>) hdr.ecn_config.port >= N_PORTS) {
                drop(DROP_MALFORMED);
            } else if (hdr.packet_out.opcode == OP_SET_ECN) {
                set_ecn();
                acknowledge();
            } else if (hdr.packet_out.opcode == OP_SET_INTERVAL) {
                set_interval();
                acknowledge();
            } else {
                drop(DROP_MALFORMED);
            }
            return;
        }

        if (sm.parser_error != error.NoError || sm.checksum_error == 1) {
            drop(DROP_MALFORMED);
        } else if (!hdr.ipv4.isValid()) {
            drop(DROP_NOT_IPV4);
        } else if (hdr.ipv4.version != 4 || hdr.ipv4.ihl != 5) {
            drop(DROP_MALFORMED);
        } else if (hdr.ipv4.ttl <= 1) {
            drop(DROP_TTL_EXPIRED);
        } else if (!ipv4_lpm.apply().hit) {
            drop(DROP_UNKNOWN_DST);
        } else {
            bit<32> port = (bit<32>) sm.egress_spec;

            // The packet joins the queue of its egress port.
            bit<32> queued;
            queue_bytes.read(queued, port);
            queue_bytes.write(port, queued + sm.packet_length);
            queue_counted.read(meta.queue_seq, port);
            meta.queue_seq = meta.queue_seq + 1;
            queue_counted.write(port, meta.queue_seq);

            // Close the port's telemetry interval when it has run its length.
            bit<48> now = sm.ingress_global_timestamp;
            bit<48> interval;
            telemetry_interval_us.read(interval, 0);
            if (interval == 0) {
                interval = DEFAULT_INTERVAL_US;
            }
            bit<48> start;
            tel_start_us.read(start, port);
            if (start == 0) {
                tel_start_us.write(port, now);
            } else if (now - start >= interval) {
                meta.telemetry.port = (bit<16>) sm.egress_spec;
                meta.telemetry.interval_us = now - start;
                tel_tx_bytes.read(meta.telemetry.tx_bytes, port);
                tel_tx_pkts.read(meta.telemetry.tx_pkts, port);
                tel_marked_bytes.read(meta.telemetry.marked_bytes, port);
                tel_marked_pkts.read(meta.telemetry.marked_pkts, port);
                tel_qdepth_sum.read(meta.telemetry.qdepth_sum_bytes, port);
                tel_qdepth_samples.read(meta.telemetry.qdepth_samples, port);
                tel_qdepth_max.read(meta.telemetry.qdepth_max_bytes, port);
                ecn_kmin.read(meta.telemetry.kmin, port);
                ecn_kmax.read(meta.telemetry.kmax, port);
                ecn_pmax.read(meta.telemetry.pmax, port);
                tel_senders.read(meta.telemetry.sender_bitmap, port);
                tel_elephant_bytes.read(meta.telemetry.elephant_bytes, port);
                digest<telemetry_digest_t>(1, meta.telemetry);

                tel_start_us.write(port, now);
                tel_tx_bytes.write(port, 0);
                tel_tx_pkts.write(port, 0);
                tel_marked_bytes.write(port, 0);
                tel_marked_pkts.write(port, 0);
                tel_qdepth_sum.write(port, 0);
                tel_qdepth_samples.write(port, 0);
                tel_qdepth_max.write(port, 0);
                tel_senders.write(port, 0);
                tel_elephant_bytes.write(port, 0);

                // The in-switch policy picks the port's next setting from the interval that
                // just closed; a port that sent nothing keeps a setting it has (ACC §4.3's
                // idle-port rule, agent/ddqn.py `held_ports`).
                if (meta.telemetry.tx_pkts != 0 || meta.telemetry.kmax == 0) {
                    if (policy_port.apply().hit) {
                        bit<16> log_interval = log2_16((bit<64>) meta.telemetry.interval_us);
                        meta.policy.qlen = log_key(QLEN_KEY_AT_ALPHA,
                            meta.telemetry.qdepth_sum_bytes == 0,
                            log2_16(meta.telemetry.qdepth_sum_bytes),
                            log2_16((bit<64>) meta.telemetry.qdepth_samples),
                            meta.policy.log2_alpha);
                        meta.policy.tx_rate = log_key(FULL_KEY, meta.telemetry.tx_bytes == 0,
                            log2_16((bit<64>) meta.telemetry.tx_bytes), log_interval,
                            meta.policy.rate_offset);
                        meta.policy.marked_rate = log_key(FULL_KEY,
                            meta.telemetry.marked_bytes == 0,
                            log2_16((bit<64>) meta.telemetry.marked_bytes), log_interval,
                            meta.policy.rate_offset);
                        meta.policy.kmin = log_key(QLEN_KEY_AT_ALPHA, meta.telemetry.kmin == 0,
                            log2_16((bit<64>) meta.telemetry.kmin), 0, meta.policy.log2_alpha);
                        meta.policy.kmax = log_key(QLEN_KEY_AT_ALPHA, meta.telemetry.kmax == 0,
                            log2_16((bit<64>) meta.telemetry.kmax), 0, meta.policy.log2_alpha);
                        meta.policy.pmax = log_key(FULL_KEY, meta.telemetry.pmax == 0,
                            log2_16((bit<64>) meta.telemetry.pmax), 0, LOG2_PMAX_ONE);
                        policy_tree.apply();
                    }
                }
            }
        }
    }
}

// ---- egress -------------------------------------------------------------------------------

control EcnEgress(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t sm) {
    bit<32> queued;  // bytes still queued behind this packet

    // The packet leaves its port's queue, in one action: BMv2 runs ingress and egress on
    // different threads and locks a register array only for the length of one action (an
    // `if` between the read and the write would split them, and an ingress increment
    // landing in between would be lost).
    //
    // Every departure bounds the estimate, which tail drops in the traffic manager (counted
    // at ingress, never dequeued) would otherwise inflate until the queue next drains: a
    // storm that keeps a queue full kept it at several times the buffer. deq_qdepth counts
    // the packets left behind this one, so what it sees behind it is at most that many
    // frames (none when it leaves an empty queue), and what is still counted is at most a
    // frame for each of those and for each packet counted after it that BMv2's ingress
    // thread may not have enqueued yet. (The stored estimate keeps those: zeroed outright at
    // an empty queue, the next packet's bytes were lost at a burst's first departure, and
    // every later packet of the burst saw one packet less behind it.)
    action leave_queue(bit<32> port) {
        bit<32> counted;
        queue_bytes.read(queued, port);
        queue_counted.read(counted, port);
        queued = queued < sm.packet_length ? 32w0 : queued - sm.packet_length;
        bit<32> after = counted - meta.queue_seq;  // counted after this packet
        bit<32> in_ingress = after > MAX_IN_INGRESS ? MAX_IN_INGRESS : after;
        bit<32> behind = (bit<32>) sm.deq_qdepth * MAX_FRAME_BYTES;
        bit<32> most = behind + in_ingress * MAX_FRAME_BYTES;
        queue_bytes.write(port, queued > most ? most : queued);
        queued = queued > behind ? behind : queued;
    }

    apply {
        if (sm.egress_port == CPU_PORT || !hdr.ipv4.isValid()) {
            return;
        }
        bit<32> port = (bit<32>) sm.egress_port;
        leave_queue(port);

        // RED/ECN: never below kmin, with probability pmax*(q-kmin)/(kmax-kmin) between,
        // always at or above kmax; only ECN-capable packets; CE stays CE.
        bit<32> kmin;
        bit<32> kmax;
        bit<64> slope;
        ecn_kmin.read(kmin, port);
        ecn_kmax.read(kmax, port);
        ecn_slope.read(slope, port);
        bool mark = false;
        if (hdr.ipv4.ecn != 0 && kmax != 0) {
            if (queued >= kmax) {
                mark = true;
            } else if (queued > kmin) {
                bit<32> coin;
                random<bit<32>>(coin, 0, 0xFFFFFFFF);
                mark = (bit<64>) coin < slope * (bit<64>) (queued - kmin);
            }
        }
        bool marked_here = mark && hdr.ipv4.ecn != 3;
        if (marked_here) {
            hdr.ipv4.ecn = 3;
        }

        // Telemetry accumulators of this interval.
        bit<32> v32;
        bit<64> v64;
        tel_tx_bytes.read(v32, port);
        tel_tx_bytes.write(port, v32 + sm.packet_length);
        tel_tx_pkts.read(v32, port);
        tel_tx_pkts.write(port, v32 + 1);
        if (marked_here) {
            tel_marked_bytes.read(v32, port);
            tel_marked_bytes.write(port, v32 + sm.packet_length);
            tel_marked_pkts.read(v32, port);
            tel_marked_pkts.write(port, v32 + 1);
        }
        tel_qdepth_sum.read(v64, port);
        tel_qdepth_sum.write(port, v64 + (bit<64>) queued);
        tel_qdepth_samples.read(v32, port);
        tel_qdepth_samples.write(port, v32 + 1);
        tel_qdepth_max.read(v32, port);
        tel_qdepth_max.write(port, queued > v32 ? queued : v32);  // no `if`: one action

        // Incast degree: one bit per source address hash.
        bit<6> sender_bit;
        hash(sender_bit, HashAlgorithm.crc32, 6w0, { hdr.ipv4.src_addr }, 7w64);
        tel_senders.read(v64, port);
        tel_senders.write(port, v64 | ((bit<64>) 1 << sender_bit));

        // Elephant bytes: per-flow byte counts in hashed slots, tagged by a second hash so a
        // new flow landing in a slot starts from zero instead of inheriting its bytes.
        bit<12> slot;
        bit<32> tag;
        hash(slot, HashAlgorithm.crc32, 12w0,
             { hdr.ipv4.src_addr, hdr.ipv4.dst_addr, hdr.ipv4.protocol,
               meta.l4_src_port, meta.l4_dst_port }, 13w4096);
        hash(tag, HashAlgorithm.crc32, 32w0,
             { hdr.ipv4.dst_addr, hdr.ipv4.src_addr, meta.l4_dst_port, meta.l4_src_port,
               hdr.ipv4.protocol }, 33w0x100000000);
        bit<32> owner;
        bit<32> seen;
        flow_tag.read(owner, (bit<32>) slot);
        flow_bytes.read(seen, (bit<32>) slot);
        if (owner != tag) {
            seen = 0;
            flow_tag.write((bit<32>) slot, tag);
        }
        seen = seen + sm.packet_length;
        flow_bytes.write((bit<32>) slot, seen);
        if (seen > ELEPHANT_BYTES) {
            tel_elephant_bytes.read(v32, port);
            tel_elephant_bytes.write(port, v32 + sm.packet_length);
        }
    }
}

control EcnComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(hdr.ipv4.isValid() && hdr.ipv4.ihl == 5,
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn, hdr.ipv4.total_len,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl,
              hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
    }
}

control EcnDeparser(packet_out pkt, in headers_t hdr) {
    apply {
        pkt.emit(hdr.packet_in);
        pkt.emit(hdr.ecn_config);
        pkt.emit(hdr.ethernet);
        pkt.emit(hdr.ipv4);
        pkt.emit(hdr.tcp);
        pkt.emit(hdr.udp);
    }
}

V1Switch(EcnParser(), EcnVerifyChecksum(), EcnIngress(), EcnEgress(), EcnComputeChecksum(),
         EcnDeparser()) main;
