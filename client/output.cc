#include "client/output.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/reflection.h>
#include <yaml-cpp/yaml.h>

#include <atomic>
#include <csignal>
#include <iostream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/context.h"
#include "runtime/log.h"

namespace tessel::ctl {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using nlohmann::json;

// "Role" -> "ROLE", "ServingStatus" -> "SERVING_STATUS".
std::string UpperSnake(const std::string& camel) {
  std::string out;
  for (size_t i = 0; i < camel.size(); ++i) {
    const char c = camel[i];
    if (i > 0 && absl::ascii_isupper(c) && absl::ascii_islower(camel[i - 1])) out += '_';
    out += absl::ascii_toupper(c);
  }
  return out;
}

json FieldValue(const Message& m, const Reflection* r, const FieldDescriptor* f, int index) {
  const bool rep = index >= 0;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return rep ? r->GetRepeatedInt32(m, f, index) : r->GetInt32(m, f);
    case FieldDescriptor::CPPTYPE_INT64:
      return rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f);
    case FieldDescriptor::CPPTYPE_UINT32:
      return rep ? r->GetRepeatedUInt32(m, f, index) : r->GetUInt32(m, f);
    case FieldDescriptor::CPPTYPE_UINT64:
      return rep ? r->GetRepeatedUInt64(m, f, index) : r->GetUInt64(m, f);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return rep ? r->GetRepeatedDouble(m, f, index) : r->GetDouble(m, f);
    case FieldDescriptor::CPPTYPE_FLOAT:
      return rep ? r->GetRepeatedFloat(m, f, index) : r->GetFloat(m, f);
    case FieldDescriptor::CPPTYPE_BOOL:
      return rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f);
    case FieldDescriptor::CPPTYPE_ENUM: {
      const auto* v = rep ? r->GetRepeatedEnum(m, f, index) : r->GetEnum(m, f);
      return EnumWord(v->type()->name(), v->name());
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      const std::string s = rep ? r->GetRepeatedString(m, f, index) : r->GetString(m, f);
      if (f->type() == FieldDescriptor::TYPE_BYTES) return absl::Base64Escape(s);
      return s;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return ProtoJson(rep ? r->GetRepeatedMessage(m, f, index) : r->GetMessage(m, f));
  }
  return nullptr;
}

std::atomic<bool> interrupted{false};
void OnSignal(int) { interrupted.store(true); }

void EmitYaml(YAML::Emitter& out, const json& v) {
  if (v.is_object()) {
    out << YAML::BeginMap;
    for (auto it = v.begin(); it != v.end(); ++it) {
      out << YAML::Key << it.key() << YAML::Value;
      EmitYaml(out, it.value());
    }
    out << YAML::EndMap;
  } else if (v.is_array()) {
    out << YAML::BeginSeq;
    for (const json& e : v) EmitYaml(out, e);
    out << YAML::EndSeq;
  } else if (v.is_string()) {
    // Quoted where a plain scalar would read back as another type ("123",
    // "true", "null", "").
    const std::string s = v.get<std::string>();
    const json as_json = json::parse(s, nullptr, false);
    const std::string lower = absl::AsciiStrToLower(s);
    const bool other_type = s.empty() || (!as_json.is_discarded() && !as_json.is_string()) ||
                            lower == "yes" || lower == "no" || lower == "on" || lower == "off" ||
                            lower == "~" || lower == "y" || lower == "n";
    if (other_type) out << YAML::DoubleQuoted;
    out << s;
  } else if (v.is_boolean()) {
    out << (v.get<bool>() ? "true" : "false");
  } else if (v.is_null()) {
    out << YAML::Null;
  } else if (v.is_number_float()) {
    // JSON's shortest form, made a YAML 1.1 float: a YAML 1.1 reader (PyYAML)
    // takes "1e-05" for a string, "1.0e-05" for a number.
    std::string d = v.dump();
    const size_t e = d.find_first_of("eE");
    if (e != std::string::npos && d.find('.') == std::string::npos) d.insert(e, ".0");
    out << d;
  } else {
    out << v.dump();  // integers exactly as JSON writes them
  }
}

}  // namespace

bool HoldsNoElements(const v1::ShardStats& st) { return st.range_end() <= st.range_begin(); }

std::string ShardStep(const v1::ShardStats& st) {
  return HoldsNoElements(st) ? "-" : absl::StrCat(st.step());
}

std::string CheckpointHealth(const v1::ShardStats& st) {
  if (st.checkpoint_failing_since() < 0) return st.checkpoint_error();
  return absl::StrCat("checkpoints failing since step ", st.checkpoint_failing_since(), ": ",
                      st.checkpoint_error());
}

std::string EnumWord(const std::string& enum_type, const std::string& value_name) {
  const std::string prefix = UpperSnake(enum_type) + "_";
  std::string word = value_name;
  if (absl::StartsWith(word, prefix)) word = word.substr(prefix.size());
  return absl::AsciiStrToLower(word);
}

json ProtoJson(const Message& m) {
  json out = json::object();
  const auto* d = m.GetDescriptor();
  const Reflection* r = m.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->is_repeated()) {
      json a = json::array();
      for (int k = 0; k < r->FieldSize(m, f); ++k) a.push_back(FieldValue(m, r, f, k));
      out[f->name()] = a;
    } else {
      out[f->name()] = FieldValue(m, r, f, -1);
    }
  }
  return out;
}

std::string ToYaml(const json& value) {
  YAML::Emitter out;
  EmitYaml(out, value);
  return std::string(out.c_str()) + "\n";
}

void Render(const Globals& g, const json& data, const std::function<void(std::ostream&)>& table,
            std::ostream& out) {
  if (g.output == "json") {
    out << data.dump(2) << "\n";
  } else if (g.output == "yaml") {
    out << ToYaml(data);
  } else {
    table(out);
  }
}

int Watchable(const Globals& g, const std::function<int(std::ostream&)>& once) {
  if (!g.watch) return once(std::cout);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::string last;
  bool first = true;
  while (!interrupted.load()) {
    std::ostringstream text;
    const int rc = once(text);
    if (rc != kOk && rc != kUnavailable) return rc;
    if (first || text.str() != last) {
      std::cout << "# " << FormatRfc3339Utc(absl::Now()) << "\n" << text.str() << std::flush;
      last = text.str();
      first = false;
    }
    const absl::Time until = absl::Now() + absl::Seconds(g.watch_interval_s);
    while (!interrupted.load() && absl::Now() < until) absl::SleepFor(absl::Milliseconds(50));
  }
  return kOk;
}

}  // namespace tessel::ctl
