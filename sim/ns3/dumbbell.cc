// ecntune sim validation: N DCTCP flows through one RED/ECN bottleneck in ns-3 — long
// flows (--bytes=0) or an N:1 incast of --bytes each, whose completion times are reported.
//
//   sender i --(access: rate, delay)--> left --(bottleneck: rate, delay)--> right
//       --(receiver link: recvRate, recvDelay)--> receiver
//
// TcpDctcp on every host (--tcp=ns3::TcpCubic or ns3::TcpNewReno: classic ECN, what the
// emulation's Linux hosts run), ECN on, RedQueueDisc on the bottleneck egress (left -> right) as
// DCTCP's step marker: QW = 1 (instantaneous queue), MinTh = MaxTh = K packets, not gentle,
// ECN marks instead of drops, a buffer far above K. Device queues hold one packet so the
// queue builds in the queue disc. The queue disc length is sampled every 100 us; at the end
// one JSON line reports the second half of the run (after slow start).
//
// Build: g++ -O2 -std=c++17 dumbbell.cc -o dumbbell $(pkg-config --cflags --libs ns3-core
//        ns3-network ns3-internet ns3-point-to-point ns3-traffic-control ns3-applications)
// Run:   ./dumbbell --n=4 --k=20 --rate=1Gbps --delay=10us --duration=0.2
//        ./dumbbell --n=16 --bytes=64000 --k=20 --rate=10Gbps --duration=0.02   (incast)

#include "ecn_defaults.h"
#include "ns3/applications-module.h"
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

using namespace ns3;

namespace
{
std::vector<double> g_queue;  // queue-disc bytes, second half
uint64_t g_wireBytes = 0;     // bytes sent on the bottleneck, second half (incl. PPP header)
double g_half = 0.0;
uint64_t g_flowBytes = 0;                // per sender; 0: unlimited (long flows)
std::map<Ipv4Address, uint64_t> g_rx;    // bytes received per sender
std::map<Ipv4Address, double> g_done;    // when each sender's last byte arrived

void
SampleQueue(Ptr<QueueDisc> q)
{
    if (Simulator::Now().GetSeconds() >= g_half)
    {
        g_queue.push_back(static_cast<double>(q->GetNBytes()));
    }
    Simulator::Schedule(MicroSeconds(100), &SampleQueue, q);
}

void
OnBottleneckTx(Ptr<const Packet> p)
{
    if (Simulator::Now().GetSeconds() >= g_half)
    {
        g_wireBytes += p->GetSize();
    }
}
void
OnSinkRx(Ptr<const Packet> p, const Address& from)
{
    Ipv4Address src = InetSocketAddress::ConvertFrom(from).GetIpv4();
    g_rx[src] += p->GetSize();
    if (g_flowBytes > 0 && g_rx[src] >= g_flowBytes && g_done.count(src) == 0)
    {
        g_done[src] = Simulator::Now().GetSeconds();
    }
}
} // namespace

int
main(int argc, char* argv[])
{
    uint32_t n = 2;
    uint32_t k = 20;
    std::string rate = "1Gbps";
    std::string delay = "10us";
    std::string accessRate = "";  // default: the bottleneck rate
    std::string accessDelay = ""; // default: the bottleneck delay
    std::string recvRate = "100Gbps";
    std::string recvDelay = "0us";
    uint32_t bufferPkts = 10000;
    double duration = 0.2;
    std::string tcp = "ns3::TcpDctcp";

    CommandLine cmd(__FILE__);
    cmd.AddValue("n", "number of senders", n);
    cmd.AddValue("k", "marking threshold K in packets (MinTh = MaxTh = K)", k);
    cmd.AddValue("rate", "bottleneck rate", rate);
    cmd.AddValue("delay", "bottleneck one-way delay", delay);
    cmd.AddValue("accessRate", "sender access link rate (default: rate)", accessRate);
    cmd.AddValue("accessDelay", "sender access link delay (default: delay)", accessDelay);
    cmd.AddValue("recvRate", "right router -> receiver link rate", recvRate);
    cmd.AddValue("recvDelay", "right router -> receiver link delay", recvDelay);
    cmd.AddValue("buffer", "bottleneck queue-disc size in packets", bufferPkts);
    cmd.AddValue("duration", "simulated seconds", duration);
    cmd.AddValue("bytes", "bytes per sender (0: unlimited, long flows)", g_flowBytes);
    cmd.AddValue("tcp", "the hosts' TCP (ns-3 socket type)", tcp);
    cmd.Parse(argc, argv);
    if (accessRate.empty())
    {
        accessRate = rate;
    }
    if (accessDelay.empty())
    {
        accessDelay = delay;
    }
    g_half = duration / 2;

    ecntune::UseEcnHosts(tcp);

    ecntune::UseRedAsTheP4ProgramMarks();
    Config::SetDefault("ns3::RedQueueDisc::MinTh", DoubleValue(k));
    Config::SetDefault("ns3::RedQueueDisc::MaxTh", DoubleValue(k));
    Config::SetDefault("ns3::RedQueueDisc::MaxSize",
                       QueueSizeValue(QueueSize(QueueSizeUnit::PACKETS, bufferPkts)));

    NodeContainer senders;
    senders.Create(n);
    NodeContainer routers;
    routers.Create(2);
    NodeContainer receiver;
    receiver.Create(1);
    InternetStackHelper stack;
    stack.InstallAll();

    PointToPointHelper access;
    access.SetDeviceAttribute("DataRate", StringValue(accessRate));
    access.SetChannelAttribute("Delay", StringValue(accessDelay));
    access.SetQueue("ns3::DropTailQueue", "MaxSize", StringValue("1p"));
    PointToPointHelper bottleneck;
    bottleneck.SetDeviceAttribute("DataRate", StringValue(rate));
    bottleneck.SetChannelAttribute("Delay", StringValue(delay));
    bottleneck.SetQueue("ns3::DropTailQueue", "MaxSize", StringValue("1p"));
    PointToPointHelper last;
    last.SetDeviceAttribute("DataRate", StringValue(recvRate));
    last.SetChannelAttribute("Delay", StringValue(recvDelay));
    last.SetQueue("ns3::DropTailQueue", "MaxSize", StringValue("1p"));

    TrafficControlHelper fifo; // every queue but the bottleneck: a large plain FIFO
    fifo.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize", StringValue("10000p"));
    TrafficControlHelper red;
    red.SetRootQueueDisc("ns3::RedQueueDisc",
                         "LinkBandwidth", StringValue(rate),
                         "LinkDelay", StringValue(delay));

    Ipv4AddressHelper addr;
    for (uint32_t i = 0; i < n; ++i)
    {
        NetDeviceContainer d = access.Install(senders.Get(i), routers.Get(0));
        fifo.Install(d);
        char net[32];
        std::snprintf(net, sizeof(net), "10.1.%u.0", i + 1);
        addr.SetBase(net, "255.255.255.0");
        addr.Assign(d);
    }
    NetDeviceContainer core = bottleneck.Install(routers.Get(0), routers.Get(1));
    QueueDiscContainer redQ = red.Install(core.Get(0));
    fifo.Install(core.Get(1));
    addr.SetBase("10.2.1.0", "255.255.255.0");
    addr.Assign(core);
    NetDeviceContainer tail = last.Install(routers.Get(1), receiver.Get(0));
    fifo.Install(tail);
    addr.SetBase("10.3.1.0", "255.255.255.0");
    Ipv4InterfaceContainer tailIf = addr.Assign(tail);
    Ipv4GlobalRoutingHelper::PopulateRoutingTables();

    uint16_t port = 5000;
    PacketSinkHelper sinkHelper("ns3::TcpSocketFactory",
                                InetSocketAddress(Ipv4Address::GetAny(), port));
    ApplicationContainer sinkApp = sinkHelper.Install(receiver.Get(0));
    sinkApp.Start(Seconds(0));
    Ptr<PacketSink> sink = DynamicCast<PacketSink>(sinkApp.Get(0));
    for (uint32_t i = 0; i < n; ++i)
    {
        BulkSendHelper bulk("ns3::TcpSocketFactory", InetSocketAddress(tailIf.GetAddress(1), port));
        bulk.SetAttribute("MaxBytes", UintegerValue(g_flowBytes)); // 0: unlimited
        bulk.SetAttribute("SendSize", UintegerValue(1448));
        ApplicationContainer app = bulk.Install(senders.Get(i));
        app.Start(MicroSeconds(1000 + 10 * i)); // near-synchronised starts
    }

    core.Get(0)->TraceConnectWithoutContext("PhyTxEnd", MakeCallback(&OnBottleneckTx));
    sink->TraceConnectWithoutContext("Rx", MakeCallback(&OnSinkRx));
    Simulator::Schedule(MicroSeconds(100), &SampleQueue, redQ.Get(0));
    uint64_t rxHalf = 0;
    Simulator::Schedule(Seconds(g_half), [&]() { rxHalf = sink->GetTotalRx(); });

    Simulator::Stop(Seconds(duration));
    Simulator::Run();

    double secs = duration - g_half;
    double throughput = 8.0 * static_cast<double>(sink->GetTotalRx() - rxHalf) / secs;
    double wire = 8.0 * static_cast<double>(g_wireBytes) / secs;
    std::vector<double> q = g_queue;
    double mean = 0.0;
    for (double v : q)
    {
        mean += v;
    }
    mean = q.empty() ? 0.0 : mean / q.size();
    double p99 = 0.0;
    double p1 = 0.0;
    if (!q.empty())
    {
        std::sort(q.begin(), q.end());
        p99 = q[static_cast<size_t>(0.99 * (q.size() - 1))];
        p1 = q[static_cast<size_t>(0.01 * (q.size() - 1))];
    }
    QueueDisc::Stats st = redQ.Get(0)->GetStats();
    // completion times from each sender's start (apps start at 1000 + 10 i us), in order
    std::string fct = "[";
    for (uint32_t i = 0; i < n; ++i)
    {
        char net[32];
        std::snprintf(net, sizeof(net), "10.1.%u.1", i + 1);
        auto it = g_done.find(Ipv4Address(net));
        double start = 1e-3 + 10e-6 * i;
        char v[32];
        std::snprintf(v, sizeof(v), "%s%.9f", i ? ", " : "", it == g_done.end() ? -1.0 : it->second - start);
        fct += v;
    }
    fct += "]";
    std::printf("{\"fct_s\": %s, \"N\": %u, \"K\": %u, \"throughput_bps\": %.1f, \"bottleneck_wire_bps\": %.1f, "
                "\"queue_mean_bytes\": %.1f, \"queue_p99_bytes\": %.1f, \"queue_p1_bytes\": %.1f, "
                "\"samples\": %zu, \"marked_packets\": %u, \"dropped_packets\": %u}\n",
                fct.c_str(), n, k, throughput, wire, mean, p99, p1, q.size(),
                st.GetNMarkedPackets(RedQueueDisc::FORCED_MARK), st.nTotalDroppedPackets);
    Simulator::Destroy();
    return 0;
}
