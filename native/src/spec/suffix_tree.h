// SuffixTree: every suffix of its sequences, cut at max_depth tokens, in one path-compressed tree
// whose nodes count the suffixes that pass through them (suffix decoding, Oliaro et al. 2024).
// A node's edge is a slice of one sequence's tokens (seq, start, len), so memory grows with the
// number of branches, not with tokens x depth. Appending a token extends each of the sequence's
// open suffixes (at most max_depth of them) by one step: O(max_depth) per token.
//
// speculate() finds the suffixes of a context that the tree holds and, below each, follows the
// most frequent child while the running product of count(child) / count(node) stays above a
// floor; the match whose path promises the most accepted tokens (the sum of those products)
// wins. Longer matches are more specific; the floor is how the speculation length adapts to
// the frequencies seen.
//
// Worked example (max_depth 4): after "a b c a b d", the path "a b" has count 2 with children
// "c" (1) and "d" (1). Context "... a b": next "c" has probability 1/2 (or "d"; ties take the
// lower token). In the sequence's own tree the context's current occurrence ends at "a b" and
// has no continuation: excluding it (exclude_self) makes the earlier "a b c" the only one, p = 1.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "flat_map.h"

namespace tandem::spec {

class SuffixTree {
 public:
  explicit SuffixTree(int32_t max_depth);

  /** A new sequence, to be fed with append(); returns its id. The previous one is closed. */
  int32_t add_sequence();
  /** Appends a token to sequence `seq`: every open suffix of it grows by one token. */
  void append(int32_t seq, int32_t token);
  /** No more tokens for `seq`: drops its open suffixes (its tokens stay, edges point into them). */
  void close_sequence(int32_t seq);

  struct Path {
    std::vector<int32_t> tokens;
    std::vector<float> probs;  // P(token | the path before it), as counted
    float score = 0;           // sum of the running products: expected tokens accepted
    int32_t match_len = 0;
  };
  /**
   * The best continuation of context[0, n): at most `max_tokens` tokens and at most
   * max_spec_factor x the match's length. exclude_self: the context's own occurrence (a
   * sequence of this tree whose end is the context) does not count as a continuation.
   */
  void speculate(const int32_t* context, int64_t n, int32_t max_tokens, float max_spec_factor, float min_prob, bool exclude_self,
                 Path& out) const;

  int32_t max_depth() const { return max_depth_; }
  int64_t num_tokens() const { return num_tokens_; }
  int64_t num_nodes() const { return static_cast<int64_t>(nodes_.size()); }
  int64_t bytes() const;
  /** Checks the counts and links against the definition (tests): true when consistent. */
  bool check_invariants() const;

 private:
  struct Node {
    int32_t parent = -1;
    int32_t count = 0;  // suffixes that reached the first token of this node's edge
    int32_t seq = -1;   // the edge is seqs_[seq][start, start + len)
    int32_t start = 0;
    int32_t len = 0;
    int32_t first_child = -1;
    int32_t prev_sibling = -1;
    int32_t next_sibling = -1;
  };
  /** An open suffix: `off` tokens into `node`'s edge, `depth` tokens from the root. */
  struct Open {
    int32_t node = 0;
    int32_t off = 0;
    int32_t depth = 0;
  };

  static uint64_t edge_key(int32_t node, int32_t token) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(node)) << 32) | static_cast<uint32_t>(token);
  }
  int32_t token_at(int32_t node, int32_t i) const {
    const Node& n = nodes_[static_cast<size_t>(node)];
    return seqs_[static_cast<size_t>(n.seq)][static_cast<size_t>(n.start + i)];
  }
  int32_t child(int32_t node, int32_t token) const { return edges_.get(edge_key(node, token)); }
  int32_t new_leaf(int32_t parent, int32_t seq, int32_t pos);
  /** Splits `node` after `off` tokens; the open suffixes of `open` inside it are re-pointed. */
  int32_t split(int32_t node, int32_t off, std::vector<Open>& open);
  void extend(int32_t seq, int32_t pos, int32_t token, size_t i, std::vector<Open>& open);
  /** Greedy path below (node, off) at depth `depth`. */
  void follow(int32_t node, int32_t off, int32_t depth, int32_t limit, float min_prob, int32_t self, Path& out) const;

  int32_t max_depth_;
  std::vector<Node> nodes_;  // [0] is the root
  FlatMap edges_;            // (node, first token of the child's edge) -> child
  std::vector<std::vector<int32_t>> seqs_;
  std::vector<std::vector<Open>> open_;  // per sequence
  // Suffixes of closed sequences that ended inside an edge: node -> (tokens into its edge, how many).
  std::unordered_map<int32_t, std::vector<std::pair<int32_t, int32_t>>> ended_;
  int64_t num_tokens_ = 0;
};

}  // namespace tandem::spec
