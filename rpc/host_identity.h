// The identity of the host a process runs on, as the data path sees it, and
// of the process itself (ProcessIncarnation, below).
//
// The host's, as the data path sees it:
// processes with the same identity share memory (UCX's shared-memory
// transports reach each other) and the same network link. It is the kernel's
// boot id and the process's network and IPC namespaces, so a Kubernetes pod
// (its own network namespace) is its own host, as is each network namespace
// of the test harness (tests/netns.py), while ranks of one pod share one.
//
// $TESSEL_HOST_ID, when set and not empty, replaces it (an operator who
// knows better, e.g. pods of one node sharing /dev/shm and the node's link).
//
// Registered with every registry member (v1::Member.host_id, filled by
// RegistryClient::Join when the caller left it empty).
#ifndef TESSEL_RPC_HOST_IDENTITY_H_
#define TESSEL_RPC_HOST_IDENTITY_H_

#include <string>

namespace tessel {

// "BOOT_ID/net:INODE/ipc:INODE", or $TESSEL_HOST_ID. A part that cannot be
// read is "?" (the identity then still separates what it can).
std::string HostIdentity();

// This process's incarnation: 16 random hex digits, made on the first call
// and the same for the rest of the process's life (v1::Member.incarnation,
// filled by RegistryClient::Join when the caller left it empty).
std::string ProcessIncarnation();

}  // namespace tessel

#endif  // TESSEL_RPC_HOST_IDENTITY_H_
