// What both ns-3 programs share: hosts that run DCTCP as ecntune.sim's `dctcp` transport
// does (or another ECN-capable TCP), and RED configured to mark as the P4 program does.
#pragma once

#include "ns3/core-module.h"

#include <string>

namespace ecntune
{
// TCP with ECN (TcpDctcp unless told otherwise), 1500-byte IP packets, an ACK per segment,
// buffers that never limit.
inline void
UseEcnHosts(const std::string& tcp = "ns3::TcpDctcp")
{
    using namespace ns3;
    Config::SetDefault("ns3::TcpL4Protocol::SocketType", StringValue(tcp));
    Config::SetDefault("ns3::TcpSocketBase::UseEcn", StringValue("On"));
    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(1448));
    Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(1));
    Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(1 << 24));
    Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(1 << 24));
}

// RedQueueDisc on the instantaneous queue (QW = 1), marking instead of dropping, certain
// marking from MaxTh on (not gentle): the P4 program's rule. Thresholds are set per program.
inline void
UseRedAsTheP4ProgramMarks()
{
    using namespace ns3;
    Config::SetDefault("ns3::RedQueueDisc::UseEcn", BooleanValue(true));
    Config::SetDefault("ns3::RedQueueDisc::UseHardDrop", BooleanValue(false));
    Config::SetDefault("ns3::RedQueueDisc::Gentle", BooleanValue(false));
    Config::SetDefault("ns3::RedQueueDisc::MeanPktSize", UintegerValue(1500));
    Config::SetDefault("ns3::RedQueueDisc::QW", DoubleValue(1.0));
}
} // namespace ecntune
