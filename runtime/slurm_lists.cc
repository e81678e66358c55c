#include "runtime/slurm_lists.h"

#include <cctype>

namespace hora {
namespace {

Status Malformed(const std::string& var, const std::string& value, const std::string& why) {
  return InvalidArgument(
      var + "='" + value + "' is not a Slurm " +
      (var.find("TASKS") != std::string::npos ? "tasks-per-node list" : "node list") + ": " + why);
}

bool AllDigits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

std::string Pad(unsigned long long v, size_t width) {
  std::string s = std::to_string(v);
  if (s.size() < width) s.insert(0, width - s.size(), '0');
  return s;
}

// Splits at commas that are outside brackets. Returns false on a bracket out of place.
bool SplitTopLevel(const std::string& s, std::vector<std::string>* out, std::string* why) {
  int depth = 0;
  std::string cur;
  for (char c : s) {
    if (c == '[') {
      if (++depth > 1) return *why = "nested '['", false;
    } else if (c == ']') {
      if (--depth < 0) return *why = "']' without '['", false;
    } else if (c == ',' && depth == 0) {
      out->push_back(cur);
      cur.clear();
      continue;
    }
    cur += c;
  }
  if (depth != 0) return *why = "unclosed '['", false;
  out->push_back(cur);
  return true;
}

// The numbers of one bracket group's contents, "01-04,07", formatted with their padding.
bool ExpandGroup(const std::string& body, std::vector<std::string>* out, std::string* why) {
  if (body.empty()) return *why = "empty '[]'", false;
  size_t start = 0;
  while (start <= body.size()) {
    size_t comma = body.find(',', start);
    if (comma == std::string::npos) comma = body.size();
    const std::string item = body.substr(start, comma - start);
    const size_t dash = item.find('-');
    const std::string lo = item.substr(0, dash);
    const std::string hi = dash == std::string::npos ? lo : item.substr(dash + 1);
    if (!AllDigits(lo) || !AllDigits(hi) || lo.size() > 9 || hi.size() > 9) {
      return *why = "'" + item + "' in '[" + body + "]' is not a number or a range a-b", false;
    }
    const unsigned long long a = std::stoull(lo), b = std::stoull(hi);
    if (b < a) return *why = "range '" + item + "' ends before it starts", false;
    for (unsigned long long v = a; v <= b; ++v) {
      if (out->size() >= kMaxSlurmHosts)
        return *why = "more than " + std::to_string(kMaxSlurmHosts) + " hosts", false;
      out->push_back(Pad(v, lo.size()));
    }
    start = comma + 1;
  }
  return true;
}

// One top-level item, "rack[1-2]-n[01-02]", appended to `hosts` as the product of its groups.
bool ExpandName(const std::string& name, std::vector<std::string>* hosts, std::string* why) {
  if (name.empty()) return *why = "an empty name", false;
  std::vector<std::string> partial{""};
  size_t i = 0;
  while (i < name.size()) {
    if (name[i] == '[') {
      const size_t close = name.find(']', i);  // SplitTopLevel checked that it exists
      std::vector<std::string> numbers;
      if (!ExpandGroup(name.substr(i + 1, close - i - 1), &numbers, why)) return false;
      if (partial.size() * numbers.size() + hosts->size() > kMaxSlurmHosts) {
        return *why = "more than " + std::to_string(kMaxSlurmHosts) + " hosts", false;
      }
      std::vector<std::string> next;
      next.reserve(partial.size() * numbers.size());
      for (const std::string& p : partial) {
        for (const std::string& n : numbers) next.push_back(p + n);
      }
      partial.swap(next);
      i = close + 1;
    } else {
      const char c = name[i++];
      if (std::isspace(static_cast<unsigned char>(c)))
        return *why = "a space in '" + name + "'", false;
      for (std::string& p : partial) p += c;
    }
  }
  hosts->insert(hosts->end(), partial.begin(), partial.end());
  return true;
}

}  // namespace

StatusOr<std::vector<std::string>> ExpandSlurmNodelist(const std::string& var,
                                                       const std::string& value) {
  if (value.empty()) return Malformed(var, value, "it is empty");
  std::vector<std::string> items;
  std::string why;
  if (!SplitTopLevel(value, &items, &why)) return Malformed(var, value, why);
  std::vector<std::string> hosts;
  for (const std::string& item : items) {
    if (!ExpandName(item, &hosts, &why)) return Malformed(var, value, why);
  }
  return hosts;
}

StatusOr<std::vector<int>> ExpandSlurmTasksPerNode(const std::string& var,
                                                   const std::string& value) {
  if (value.empty()) return Malformed(var, value, "it is empty");
  std::vector<int> tasks;
  size_t start = 0;
  while (start <= value.size()) {
    size_t comma = value.find(',', start);
    if (comma == std::string::npos) comma = value.size();
    const std::string item = value.substr(start, comma - start);
    const size_t paren = item.find('(');
    const std::string count = item.substr(0, paren);
    std::string repeat = "1";
    if (paren != std::string::npos) {
      if (item.size() < paren + 4 || item.compare(paren, 2, "(x") != 0 || item.back() != ')') {
        return Malformed(var, value, "'" + item + "' is not N or N(xR)");
      }
      repeat = item.substr(paren + 2, item.size() - paren - 3);
    }
    if (!AllDigits(count) || !AllDigits(repeat) || count.size() > 6 || repeat.size() > 7) {
      return Malformed(var, value, "'" + item + "' is not N or N(xR)");
    }
    const int n = std::stoi(count), r = std::stoi(repeat);
    if (n < 1 || r < 1) return Malformed(var, value, "'" + item + "' has a count of 0");
    if (tasks.size() + r > kMaxSlurmHosts) {
      return Malformed(var, value, "more than " + std::to_string(kMaxSlurmHosts) + " nodes");
    }
    tasks.insert(tasks.end(), r, n);
    start = comma + 1;
  }
  return tasks;
}

}  // namespace hora
