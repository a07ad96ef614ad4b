#include "suffix_tree.h"

#include <algorithm>
#include <cmath>

namespace tandem::spec {

SuffixTree::SuffixTree(int32_t max_depth) : max_depth_(std::max(2, max_depth)) { nodes_.emplace_back(); }

int32_t SuffixTree::add_sequence() {
  // One sequence is open at a time: a split re-points only the open suffixes of the sequence
  // being appended (and the recorded ends of closed ones).
  if (!seqs_.empty()) close_sequence(static_cast<int32_t>(seqs_.size() - 1));
  seqs_.emplace_back();
  open_.emplace_back();
  return static_cast<int32_t>(seqs_.size() - 1);
}

void SuffixTree::close_sequence(int32_t seq) {
  // Its open suffixes end where they are. Those inside an edge are remembered: a later split
  // there must not count them in the lower part, which they never reached.
  for (const Open& o : open_[static_cast<size_t>(seq)]) {
    if (o.node != 0 && o.off < nodes_[static_cast<size_t>(o.node)].len) ended_[o.node].push_back({o.off, 1});
  }
  std::vector<Open>().swap(open_[static_cast<size_t>(seq)]);
}

int64_t SuffixTree::bytes() const {
  int64_t b = static_cast<int64_t>(nodes_.capacity() * sizeof(Node) + edges_.bytes());
  for (const auto& s : seqs_) b += static_cast<int64_t>(s.capacity() * sizeof(int32_t));
  for (const auto& o : open_) b += static_cast<int64_t>(o.capacity() * sizeof(Open));
  for (const auto& [node, list] : ended_) b += static_cast<int64_t>(list.capacity() * 8 + 32);
  return b;
}

int32_t SuffixTree::new_leaf(int32_t parent, int32_t seq, int32_t pos) {
  const int32_t id = static_cast<int32_t>(nodes_.size());
  Node leaf;
  leaf.parent = parent;
  leaf.count = 1;
  leaf.seq = seq;
  leaf.start = pos;
  leaf.len = 1;
  Node& p = nodes_[static_cast<size_t>(parent)];
  leaf.next_sibling = p.first_child;
  if (p.first_child >= 0) nodes_[static_cast<size_t>(p.first_child)].prev_sibling = id;
  p.first_child = id;
  nodes_.push_back(leaf);
  edges_.put(edge_key(parent, seqs_[static_cast<size_t>(seq)][static_cast<size_t>(pos)]), id);
  return id;
}

int32_t SuffixTree::split(int32_t node, int32_t off, std::vector<Open>& open) {
  const int32_t mid = static_cast<int32_t>(nodes_.size());
  nodes_.emplace_back();
  Node& n = nodes_[static_cast<size_t>(node)];
  Node& m = nodes_[static_cast<size_t>(mid)];
  // mid takes node's place under its parent and keeps the first `off` tokens of the edge.
  m.parent = n.parent;
  m.count = n.count;
  m.seq = n.seq;
  m.start = n.start;
  m.len = off;
  m.prev_sibling = n.prev_sibling;
  m.next_sibling = n.next_sibling;
  m.first_child = node;
  if (n.prev_sibling >= 0) nodes_[static_cast<size_t>(n.prev_sibling)].next_sibling = mid;
  else nodes_[static_cast<size_t>(n.parent)].first_child = mid;
  if (n.next_sibling >= 0) nodes_[static_cast<size_t>(n.next_sibling)].prev_sibling = mid;
  edges_.put(edge_key(n.parent, token_at(node, 0)), mid);
  // The open suffixes inside the first part now sit in mid; they never reached the rest, so
  // the rest counts only the suffixes past the split point.
  int32_t before = 0;
  for (Open& o : open) {
    if (o.node != node) continue;
    if (o.off <= off) {
      o.node = mid;
      ++before;
    } else {
      o.off -= off;
    }
  }
  // Likewise the suffixes of closed sequences that ended inside this edge.
  auto ended = ended_.find(node);
  if (ended != ended_.end()) {
    std::vector<std::pair<int32_t, int32_t>> upper, lower;
    for (const auto& [at, count] : ended->second) {
      if (at <= off) {
        upper.push_back({at, count});
        before += count;
      } else {
        lower.push_back({at - off, count});
      }
    }
    if (lower.empty()) ended_.erase(ended);
    else ended->second = std::move(lower);
    if (!upper.empty()) ended_[mid] = std::move(upper);
  }
  n.parent = mid;
  n.start += off;
  n.len -= off;
  n.prev_sibling = -1;
  n.next_sibling = -1;
  n.count -= before;
  edges_.put(edge_key(mid, token_at(node, 0)), node);
  return mid;
}

void SuffixTree::extend(int32_t seq, int32_t pos, int32_t token, size_t i, std::vector<Open>& open) {
  Open o = open[i];
  if (o.node != 0 && o.off < nodes_[static_cast<size_t>(o.node)].len) {
    if (token_at(o.node, o.off) == token) {
      ++o.off;
    } else {
      split(o.node, o.off, open);  // re-points open[i] to the new middle node, at its end
      o = open[i];
      o.node = new_leaf(o.node, seq, pos);
      o.off = 1;
    }
  } else {
    const int32_t c = child(o.node, token);
    const Node& n = nodes_[static_cast<size_t>(o.node)];
    if (c >= 0) {
      ++nodes_[static_cast<size_t>(c)].count;
      o.node = c;
      o.off = 1;
    } else if (o.node != 0 && n.first_child < 0 && n.count == 1 && n.seq == seq && n.start + n.len == pos) {
      // Our own leaf, ending right before this token: the edge grows in place.
      ++nodes_[static_cast<size_t>(o.node)].len;
      ++o.off;
    } else {
      o.node = new_leaf(o.node, seq, pos);
      o.off = 1;
    }
  }
  ++o.depth;
  open[i] = o;
}

void SuffixTree::append(int32_t seq, int32_t token) {
  std::vector<int32_t>& tokens = seqs_[static_cast<size_t>(seq)];
  const int32_t pos = static_cast<int32_t>(tokens.size());
  tokens.push_back(token);
  ++num_tokens_;
  std::vector<Open>& open = open_[static_cast<size_t>(seq)];
  open.push_back(Open{});  // the suffix that starts here, at the root
  for (size_t i = 0; i < open.size(); ++i) extend(seq, pos, token, i, open);
  // Suffixes at max_depth are complete.
  open.erase(std::remove_if(open.begin(), open.end(), [&](const Open& o) { return o.depth >= max_depth_; }), open.end());
}

void SuffixTree::follow(int32_t node, int32_t off, int32_t depth, int32_t limit, float min_prob, int32_t self, Path& out) const {
  double running = 1.0;
  while (static_cast<int32_t>(out.tokens.size()) < limit && depth < max_depth_) {
    const Node& n = nodes_[static_cast<size_t>(node)];
    int32_t next = 0;
    double p = 1.0;
    if (node != 0 && off < n.len) {
      // Inside an edge every suffix that got here goes on (but the context's own occurrence, which ends here).
      if (n.count - self <= 0) break;
      next = token_at(node, off);
      ++off;
    } else {
      int32_t best = -1;
      for (int32_t c = n.first_child; c >= 0; c = nodes_[static_cast<size_t>(c)].next_sibling) {
        const Node& cn = nodes_[static_cast<size_t>(c)];
        if (best < 0 || cn.count > nodes_[static_cast<size_t>(best)].count ||
            (cn.count == nodes_[static_cast<size_t>(best)].count && token_at(c, 0) < token_at(best, 0))) {
          best = c;
        }
      }
      const int32_t total = n.count - self;
      if (best < 0 || total <= 0) break;
      p = std::min(1.0, static_cast<double>(nodes_[static_cast<size_t>(best)].count) / total);
      next = token_at(best, 0);
      node = best;
      off = 1;
    }
    self = 0;
    running *= p;
    if (running < min_prob) break;
    out.tokens.push_back(next);
    out.probs.push_back(static_cast<float>(p));
    out.score += static_cast<float>(running);
    ++depth;
  }
}

void SuffixTree::speculate(const int32_t* context, int64_t n, int32_t max_tokens, float max_spec_factor, float min_prob,
                           bool exclude_self, Path& out) const {
  out = Path{};
  Path candidate;
  const int32_t longest = static_cast<int32_t>(std::min<int64_t>(n, max_depth_ - 1));
  for (int32_t m = 1; m <= longest; ++m) {
    // Walk the last m tokens of the context from the root.
    int32_t node = 0, off = 0;
    bool found = true;
    for (int64_t k = n - m; k < n && found; ++k) {
      const int32_t t = context[k];
      if (node != 0 && off < nodes_[static_cast<size_t>(node)].len) {
        if (token_at(node, off) == t) ++off;
        else found = false;
      } else {
        const int32_t c = child(node, t);
        if (c < 0) found = false;
        node = c;
        off = 1;
      }
    }
    if (!found) break;  // a longer suffix contains this one: absent too
    const int32_t limit = std::min(max_tokens, static_cast<int32_t>(std::floor(max_spec_factor * static_cast<float>(m))));
    candidate = Path{};
    candidate.match_len = m;
    follow(node, off, m, limit, min_prob, exclude_self ? 1 : 0, candidate);
    if (candidate.score > out.score || (candidate.score == out.score && !candidate.tokens.empty() && candidate.tokens.size() >= out.tokens.size())) {
      out = candidate;
    }
  }
}

bool SuffixTree::check_invariants() const {
  // count(node) must equal the occurrences of the string from the root to the node's first
  // token (at most max_depth long), over every sequence: each occurrence is a suffix that grew
  // through that token.
  for (size_t id = 1; id < nodes_.size(); ++id) {
    std::vector<int32_t> path;
    path.push_back(token_at(static_cast<int32_t>(id), 0));
    for (int32_t p = nodes_[id].parent; p > 0; p = nodes_[static_cast<size_t>(p)].parent) {
      for (int32_t i = nodes_[static_cast<size_t>(p)].len - 1; i >= 0; --i) path.push_back(token_at(p, i));
    }
    std::reverse(path.begin(), path.end());
    if (static_cast<int32_t>(path.size()) > max_depth_) return false;
    int64_t occurrences = 0;
    for (const auto& s : seqs_) {
      for (size_t start = 0; start + path.size() <= s.size(); ++start) {
        if (std::equal(path.begin(), path.end(), s.begin() + static_cast<int64_t>(start))) ++occurrences;
      }
    }
    if (occurrences != nodes_[id].count) return false;
    const int32_t parent = nodes_[id].parent;
    if (child(parent, token_at(static_cast<int32_t>(id), 0)) != static_cast<int32_t>(id)) return false;
  }
  return true;
}

}  // namespace tandem::spec
