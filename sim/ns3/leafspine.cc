// ecntune sim validation and speed reference: a leaf-spine in ns-3 running the flows the
// simulator sampled for an episode (sim/ns3_reference.py writes them), each on the spine
// the simulator's ECMP hash chose, so both simulate the same work.
//
//   hosts --(hostRate, delay)--> leaves --(fabricRate, delay)--> spines
//
// TcpDctcp on every host, ECN on, one ACK per segment; every switch egress port has a
// RedQueueDisc in bytes as the P4 program marks: instantaneous queue (QW = 1), kmin/kmax in
// bytes (given for a 25 Gbit/s port, scaled to the port's rate with --scale), pmax, marks
// instead of drops below the buffer. Device queues hold one packet so queues build in the
// queue discs.
//
// Host NICs run FqCoDel with ECN and a 20 us CE threshold. What it stands in for: Linux's
// TCP small queues and fq qdisc, which keep a sender from piling megabytes into its own
// NIC queue (ns-3 has neither: a lone flow whose bottleneck is its own NIC would slow-start
// without a mark, unbounded, and every ACK the host sends would wait behind it). The
// simulator's senders never exceed their line rate, the same effect.
//
// ECMP per flow: host h owns one address per spine, 10.(s+1).leaf.(h+1); leaves route
// 10.(s+1)/16 up to spine s, spines route 10.(s+1).leaf/24 down. A flow that the simulator
// hashed onto spine s is sent from and to the hosts' spine-s addresses, so its data and ACKs
// cross spine s (what a 5-tuple hash does: one path per flow, no reordering).
//
// Flows file, one per line: "src dst spine bytes start_s" (hosts numbered from 0, leaf =
// host / hostsPerLeaf). Output, one JSON line: per flow its completion time (last byte at
// the receiver minus start; -1 if unfinished), and the switches' marks and drops.
//
// Build: g++ -O2 -std=c++17 leafspine.cc -o leafspine $(pkg-config --cflags --libs ns3-core
//        ns3-network ns3-internet ns3-point-to-point ns3-traffic-control ns3-applications)
// Run:   ./leafspine --flows=flows.txt --spines=2 --leaves=4 --hostsPerLeaf=6 --duration=0.005

#include "ecn_defaults.h"
#include "ns3/applications-module.h"
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

using namespace ns3;

namespace
{
struct Flow
{
    uint32_t src, dst, spine;
    uint64_t bytes;
    double start;
};

std::vector<Flow> g_flows;
std::vector<uint64_t> g_rx;  // bytes received per flow
std::vector<double> g_done;  // completion time per flow, -1 until done

void
OnRx(uint32_t id, Ptr<const Packet> p, const Address&)
{
    g_rx[id] += p->GetSize();
    if (g_done[id] < 0 && g_rx[id] >= g_flows[id].bytes)
    {
        g_done[id] = Simulator::Now().GetSeconds() - g_flows[id].start;
    }
}

Ipv4Address
HostAddress(uint32_t spine, uint32_t leaf, uint32_t hostInLeaf)
{
    return Ipv4Address(((10u << 24) | ((spine + 1) << 16) | (leaf << 8) | (hostInLeaf + 1)));
}

uint32_t
AddInterface(Ptr<Node> node, Ptr<NetDevice> dev, Ipv4Address addr)
{
    Ptr<Ipv4> ipv4 = node->GetObject<Ipv4>();
    uint32_t i = ipv4->AddInterface(dev);
    ipv4->AddAddress(i, Ipv4InterfaceAddress(addr, Ipv4Mask("255.255.255.255")));
    ipv4->SetUp(i);
    return i;
}

Ptr<Ipv4StaticRouting>
Routing(Ptr<Node> node)
{
    return Ipv4StaticRoutingHelper().GetStaticRouting(node->GetObject<Ipv4>());
}
} // namespace

int
main(int argc, char* argv[])
{
    uint32_t spines = 2;
    uint32_t leaves = 4;
    uint32_t hostsPerLeaf = 6;
    double hostGbps = 25;
    double fabricGbps = 100;
    std::string delay = "1us";
    uint32_t bufferBytes = 2000000;
    double kmin = 100000; // bytes at 25 Gbit/s
    double kmax = 400000;
    double pmax = 0.2;
    bool scale = true;
    double duration = 0.005;
    std::string flowsFile;

    CommandLine cmd(__FILE__);
    cmd.AddValue("spines", "spine switches", spines);
    cmd.AddValue("leaves", "leaf switches", leaves);
    cmd.AddValue("hostsPerLeaf", "hosts under each leaf", hostsPerLeaf);
    cmd.AddValue("hostGbps", "host link rate, Gbit/s", hostGbps);
    cmd.AddValue("fabricGbps", "leaf-spine link rate, Gbit/s", fabricGbps);
    cmd.AddValue("delay", "one-way delay of every link", delay);
    cmd.AddValue("buffer", "bytes per switch egress queue", bufferBytes);
    cmd.AddValue("kmin", "RED kmin, bytes (for a 25 Gbit/s port when --scale)", kmin);
    cmd.AddValue("kmax", "RED kmax, bytes (for a 25 Gbit/s port when --scale)", kmax);
    cmd.AddValue("pmax", "marking probability at kmax", pmax);
    cmd.AddValue("scale", "scale kmin and kmax with the port's rate", scale);
    cmd.AddValue("duration", "simulated seconds", duration);
    cmd.AddValue("flows", "flows file: src dst spine bytes start_s per line", flowsFile);
    cmd.Parse(argc, argv);

    std::ifstream in(flowsFile);
    if (!in)
    {
        std::fprintf(stderr, "cannot read flows file '%s'\n", flowsFile.c_str());
        return 2;
    }
    uint32_t hosts = leaves * hostsPerLeaf;
    Flow f;
    while (in >> f.src >> f.dst >> f.spine >> f.bytes >> f.start)
    {
        if (f.src >= hosts || f.dst >= hosts || f.src == f.dst || f.spine >= spines)
        {
            std::fprintf(stderr, "bad flow line %zu\n", g_flows.size() + 1);
            return 2;
        }
        g_flows.push_back(f);
    }
    g_rx.assign(g_flows.size(), 0);
    g_done.assign(g_flows.size(), -1.0);

    ecntune::UseEcnHosts();
    Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(MilliSeconds(1)));

    ecntune::UseRedAsTheP4ProgramMarks();
    Config::SetDefault("ns3::RedQueueDisc::LInterm", DoubleValue(1.0 / pmax));
    Config::SetDefault("ns3::RedQueueDisc::MaxSize",
                       QueueSizeValue(QueueSize(QueueSizeUnit::BYTES, bufferBytes)));

    NodeContainer hostNodes, leafNodes, spineNodes;
    hostNodes.Create(hosts);
    leafNodes.Create(leaves);
    spineNodes.Create(spines);
    InternetStackHelper stack;
    stack.InstallAll();

    TrafficControlHelper nic;
    nic.SetRootQueueDisc("ns3::FqCoDelQueueDisc", "UseEcn", BooleanValue(true),
                         "CeThreshold", TimeValue(MicroSeconds(20)),
                         "MaxSize", StringValue("100000p"));
    auto red = [&](double gbps) {
        double s = scale ? gbps / 25.0 : 1.0;
        TrafficControlHelper t;
        t.SetRootQueueDisc("ns3::RedQueueDisc",
                           "MinTh", DoubleValue(kmin * s), "MaxTh", DoubleValue(kmax * s),
                           "LinkBandwidth", DataRateValue(DataRate(gbps * 1e9)),
                           "LinkDelay", StringValue(delay));
        return t;
    };
    auto link = [&](double gbps) {
        PointToPointHelper p;
        p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(gbps * 1e9)));
        p.SetChannelAttribute("Delay", StringValue(delay));
        p.SetQueue("ns3::DropTailQueue", "MaxSize", StringValue("1p"));
        return p;
    };
    TrafficControlHelper hostRed = red(hostGbps), fabricRed = red(fabricGbps);
    PointToPointHelper hostLink = link(hostGbps), fabricLink = link(fabricGbps);
    std::vector<QueueDiscContainer> switchQueues;

    for (uint32_t h = 0; h < hosts; ++h)
    {
        uint32_t leaf = h / hostsPerLeaf, in = h % hostsPerLeaf;
        NetDeviceContainer d = hostLink.Install(hostNodes.Get(h), leafNodes.Get(leaf));
        nic.Install(d.Get(0));
        switchQueues.push_back(hostRed.Install(d.Get(1)));
        Ptr<Ipv4> ipv4 = hostNodes.Get(h)->GetObject<Ipv4>();
        uint32_t hi = AddInterface(hostNodes.Get(h), d.Get(0), HostAddress(0, leaf, in));
        for (uint32_t s = 1; s < spines; ++s)
        {
            ipv4->AddAddress(hi, Ipv4InterfaceAddress(HostAddress(s, leaf, in),
                                                      Ipv4Mask("255.255.255.255")));
        }
        Routing(hostNodes.Get(h))->AddNetworkRouteTo("10.0.0.0", "255.0.0.0", hi);
        uint32_t li = AddInterface(leafNodes.Get(leaf), d.Get(1),
                                   Ipv4Address((11u << 24) | (leaf << 8) | (in + 1)));
        for (uint32_t s = 0; s < spines; ++s)
        {
            Routing(leafNodes.Get(leaf))->AddHostRouteTo(HostAddress(s, leaf, in), li);
        }
    }
    for (uint32_t leaf = 0; leaf < leaves; ++leaf)
    {
        for (uint32_t s = 0; s < spines; ++s)
        {
            NetDeviceContainer d = fabricLink.Install(leafNodes.Get(leaf), spineNodes.Get(s));
            switchQueues.push_back(fabricRed.Install(d));
            uint32_t base = (12u << 24) | (leaf << 16) | (s << 8);
            uint32_t li = AddInterface(leafNodes.Get(leaf), d.Get(0), Ipv4Address(base | 1));
            uint32_t si = AddInterface(spineNodes.Get(s), d.Get(1), Ipv4Address(base | 2));
            Routing(leafNodes.Get(leaf))
                ->AddNetworkRouteTo(Ipv4Address((10u << 24) | ((s + 1) << 16)),
                                    Ipv4Mask("255.255.0.0"), li);
            Routing(spineNodes.Get(s))
                ->AddNetworkRouteTo(Ipv4Address((10u << 24) | ((s + 1) << 16) | (leaf << 8)),
                                    Ipv4Mask("255.255.255.0"), si);
        }
    }

    for (uint32_t id = 0; id < g_flows.size(); ++id)
    {
        const Flow& fl = g_flows[id];
        uint16_t port = static_cast<uint16_t>(1024 + id % 60000);
        Ipv4Address to = HostAddress(fl.spine, fl.dst / hostsPerLeaf, fl.dst % hostsPerLeaf);
        Ipv4Address from = HostAddress(fl.spine, fl.src / hostsPerLeaf, fl.src % hostsPerLeaf);
        PacketSinkHelper sink("ns3::TcpSocketFactory", InetSocketAddress(Ipv4Address::GetAny(), port));
        ApplicationContainer s = sink.Install(hostNodes.Get(fl.dst));
        s.Start(Seconds(0));
        s.Get(0)->TraceConnectWithoutContext("Rx", MakeBoundCallback(&OnRx, id));
        BulkSendHelper bulk("ns3::TcpSocketFactory", InetSocketAddress(to, port));
        bulk.SetAttribute("Local", AddressValue(InetSocketAddress(from, 0)));
        bulk.SetAttribute("MaxBytes", UintegerValue(fl.bytes));
        bulk.SetAttribute("SendSize", UintegerValue(1448));
        ApplicationContainer app = bulk.Install(hostNodes.Get(fl.src));
        app.Start(Seconds(fl.start));
    }

    Simulator::Stop(Seconds(duration));
    Simulator::Run();

    uint64_t marked = 0, dropped = 0;
    for (auto& qs : switchQueues)
    {
        for (uint32_t i = 0; i < qs.GetN(); ++i)
        {
            QueueDisc::Stats st = qs.Get(i)->GetStats();
            marked += st.GetNMarkedPackets(RedQueueDisc::FORCED_MARK) +
                      st.GetNMarkedPackets(RedQueueDisc::UNFORCED_MARK);
            dropped += st.nTotalDroppedPackets;
        }
    }
    std::printf("{\"fct_s\": [");
    for (size_t i = 0; i < g_done.size(); ++i)
    {
        std::printf("%s%.9f", i ? ", " : "", g_done[i]);
    }
    std::printf("], \"flows\": %zu, \"marked_packets\": %llu, \"dropped_packets\": %llu}\n",
                g_flows.size(), static_cast<unsigned long long>(marked),
                static_cast<unsigned long long>(dropped));
    Simulator::Destroy();
    return 0;
}
