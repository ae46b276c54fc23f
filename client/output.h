// How tesselctl prints: every read command builds one JSON value and renders
// it as -o json, -o yaml, or its own table (-o table, the default), with
// kubectl's conventions: numbers are numbers (int64 too), enums are
// lower-case words ("server", "zero2", "adam"), field names are the proto's.
// --watch re-renders every --watch_interval and prints when the output
// changed, until interrupted.
//
// Example:
//   nlohmann::json data = ProtoJson(stats);      // proto field names
//   Render(g, data, [&](std::ostream& out) { out << "STEP " << stats.step() << "\n"; });
#ifndef TESSEL_CLIENT_OUTPUT_H_
#define TESSEL_CLIENT_OUTPUT_H_

#include <google/protobuf/message.h>

#include <functional>
#include <ostream>
#include <string>

#include "nlohmann/json.hpp"
#include "proto/shard.pb.h"

namespace tessel::ctl {

struct Globals;

// `m` as JSON: every field (unset ones with their defaults), proto field
// names, 64-bit integers as numbers, enums as lower-case words without
// their type's prefix (ROLE_SERVER -> "server"), bytes as base64.
nlohmann::json ProtoJson(const google::protobuf::Message& m);

// The lower-case word for an enum value name: "ROLE_SERVER" of enum "Role"
// -> "server"; "SGD" of enum "Kind" -> "sgd".
std::string EnumWord(const std::string& enum_type, const std::string& value_name);

// A shard that holds none of the job's elements takes no part in its steps
// (core/layout.h, Layout::shard_empty): its step is not the job's, so it is
// left out of the job's step range and shown as "-" (ShardStep).
bool HoldsNoElements(const v1::ShardStats& st);
std::string ShardStep(const v1::ShardStats& st);

// A shard's checkpoint trouble for a HEALTH column: "checkpoints failing
// since step N: <error>" (or the error alone from an older server).
std::string CheckpointHealth(const v1::ShardStats& st);

// `value` as a YAML document (block style, keys in the JSON's order).
std::string ToYaml(const nlohmann::json& value);

// Prints `data` per -o: json, yaml, or `table()` (which prints to `out`).
void Render(const Globals& g, const nlohmann::json& data,
            const std::function<void(std::ostream& out)>& table, std::ostream& out);

// Runs `once` (which renders to the stream it is given and returns an exit
// code). With --watch: again every --watch_interval, printing only output
// that changed, each time under a "# <RFC 3339 time>" line, until SIGINT or
// SIGTERM (exit 0) or a failure (its exit code).
int Watchable(const Globals& g, const std::function<int(std::ostream& out)>& once);

}  // namespace tessel::ctl

#endif  // TESSEL_CLIENT_OUTPUT_H_
