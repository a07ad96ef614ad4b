// torch.topk's order of equal values, on one thread. torch's CPU kernel (aten TopKImpl.h) sorts
// (value, index) pairs with libstdc++: std::partial_sort of the first k when k * 64 <= n, else
// std::nth_element at k - 1 followed by std::sort of the first k - 1, comparing "greater"
// (NaN first). Equal values come out in whatever order those algorithms leave them (8 equal
// values, k = 2: indices 6, 5), so matching transformers' routing on ties means running the
// same algorithms. These are libstdc++'s (introselect, median-of-three pivot, unguarded
// partition, insertion sort below 16 elements, heap select), written out so a kernel can run
// them; the recursion of introsort is an explicit stack (its two halves are disjoint, so the
// order they are visited in does not change the result). The route kernel uses this only when
// the top k + 1 values hold a tie; the CPU backend calls the std:: algorithms themselves, and
// the kernel checks compare the two on random tie patterns.
#pragma once

#include "../kernel_lang.h"

namespace tandem::gpu::TD_NS {

struct TopkItem {
  float value;
  int32_t index;
};

/** torch's "largest" comparator: NaN ranks first, then greater values. */
TD_DEVICE bool topk_before(const TopkItem& x, const TopkItem& y) {
  const bool xn = x.value != x.value, yn = y.value != y.value;
  return (xn && !yn) || x.value > y.value;
}

TD_DEVICE void topk_swap(TopkItem* a, TopkItem* b) {
  const TopkItem t = *a;
  *a = *b;
  *b = t;
}

TD_DEVICE int topk_lg(int n) {
  int r = 0;
  while (n > 1) {
    n >>= 1;
    ++r;
  }
  return r;
}

// ---- heaps (std::__adjust_heap, __push_heap, __make_heap, __pop_heap, __heap_select, __sort_heap)

TD_DEVICE void topk_push_heap(TopkItem* first, int hole, int top, TopkItem value) {
  int parent = (hole - 1) / 2;
  while (hole > top && topk_before(first[parent], value)) {
    first[hole] = first[parent];
    hole = parent;
    parent = (hole - 1) / 2;
  }
  first[hole] = value;
}

TD_DEVICE void topk_adjust_heap(TopkItem* first, int hole, int len, TopkItem value) {
  const int top = hole;
  int child = hole;
  while (child < (len - 1) / 2) {
    child = 2 * (child + 1);
    if (topk_before(first[child], first[child - 1])) --child;
    first[hole] = first[child];
    hole = child;
  }
  if ((len & 1) == 0 && child == (len - 2) / 2) {
    child = 2 * (child + 1);
    first[hole] = first[child - 1];
    hole = child - 1;
  }
  topk_push_heap(first, hole, top, value);
}

TD_DEVICE void topk_make_heap(TopkItem* first, int len) {
  if (len < 2) return;
  for (int parent = (len - 2) / 2;; --parent) {
    topk_adjust_heap(first, parent, len, first[parent]);
    if (parent == 0) return;
  }
}

TD_DEVICE void topk_pop_heap(TopkItem* first, int len, TopkItem* result) {
  const TopkItem value = *result;
  *result = first[0];
  topk_adjust_heap(first, 0, len, value);
}

TD_DEVICE void topk_heap_select(TopkItem* first, int middle, int last) {
  topk_make_heap(first, middle);
  for (int i = middle; i < last; ++i) {
    if (topk_before(first[i], first[0])) topk_pop_heap(first, middle, first + i);
  }
}

TD_DEVICE void topk_sort_heap(TopkItem* first, int len) {
  while (len > 1) {
    --len;
    topk_pop_heap(first, len, first + len);
  }
}

// ---- insertion sorts (std::__unguarded_linear_insert, __insertion_sort) ----------------------

TD_DEVICE void topk_linear_insert(TopkItem* last) {
  const TopkItem value = *last;
  TopkItem* next = last - 1;
  while (topk_before(value, *next)) {
    *last = *next;
    last = next;
    --next;
  }
  *last = value;
}

TD_DEVICE void topk_insertion_sort(TopkItem* first, TopkItem* last) {
  if (first == last) return;
  for (TopkItem* i = first + 1; i != last; ++i) {
    if (topk_before(*i, *first)) {
      const TopkItem value = *i;
      for (TopkItem* p = i; p != first; --p) *p = *(p - 1);
      *first = value;
    } else {
      topk_linear_insert(i);
    }
  }
}

// ---- partitioning (std::__move_median_to_first, __unguarded_partition, _pivot) ---------------

TD_DEVICE void topk_median_to_first(TopkItem* result, TopkItem* a, TopkItem* b, TopkItem* c) {
  if (topk_before(*a, *b)) {
    if (topk_before(*b, *c)) topk_swap(result, b);
    else if (topk_before(*a, *c)) topk_swap(result, c);
    else topk_swap(result, a);
  } else if (topk_before(*a, *c)) {
    topk_swap(result, a);
  } else if (topk_before(*b, *c)) {
    topk_swap(result, c);
  } else {
    topk_swap(result, b);
  }
}

TD_DEVICE TopkItem* topk_partition_pivot(TopkItem* first, TopkItem* last) {
  TopkItem* mid = first + (last - first) / 2;
  topk_median_to_first(first, first + 1, mid, last - 1);
  TopkItem* lo = first + 1;
  TopkItem* hi = last;
  const TopkItem* pivot = first;
  for (;;) {
    while (topk_before(*lo, *pivot)) ++lo;
    --hi;
    while (topk_before(*pivot, *hi)) --hi;
    if (!(lo < hi)) return lo;
    topk_swap(lo, hi);
    ++lo;
  }
}

// ---- std::nth_element, std::sort, std::partial_sort ------------------------------------------

TD_DEVICE void topk_nth_element(TopkItem* first, TopkItem* nth, TopkItem* last) {
  if (first == last || nth == last) return;
  int depth = 2 * topk_lg(static_cast<int>(last - first));
  while (last - first > 3) {
    if (depth == 0) {
      topk_heap_select(first, static_cast<int>(nth - first) + 1, static_cast<int>(last - first));
      topk_swap(first, nth);
      return;
    }
    --depth;
    TopkItem* cut = topk_partition_pivot(first, last);
    if (cut <= nth) first = cut;
    else last = cut;
  }
  topk_insertion_sort(first, last);
}

TD_DEVICE void topk_sort(TopkItem* first, TopkItem* last) {
  if (first == last) return;
  constexpr int kThreshold = 16;
  struct Frame {
    TopkItem* first;
    TopkItem* last;
    int depth;
  };
  Frame stack[64];
  int top = 0;
  stack[top++] = {first, last, 2 * topk_lg(static_cast<int>(last - first))};
  while (top > 0) {  // std::__introsort_loop
    Frame f = stack[--top];
    while (f.last - f.first > kThreshold) {
      if (f.depth == 0) {  // std::__partial_sort(first, last, last): heap sort
        topk_heap_select(f.first, static_cast<int>(f.last - f.first), static_cast<int>(f.last - f.first));
        topk_sort_heap(f.first, static_cast<int>(f.last - f.first));
        break;
      }
      --f.depth;
      TopkItem* cut = topk_partition_pivot(f.first, f.last);
      stack[top++] = {cut, f.last, f.depth};
      f.last = cut;
    }
  }
  // std::__final_insertion_sort
  if (last - first > kThreshold) {
    topk_insertion_sort(first, first + kThreshold);
    for (TopkItem* i = first + kThreshold; i != last; ++i) topk_linear_insert(i);
  } else {
    topk_insertion_sort(first, last);
  }
}

/** items[0, n) in index order -> items[0, k) in torch.topk's order (the rest is scratch). */
TD_DEVICE void torch_topk_order(TopkItem* items, int n, int k) {
  if (k * 64 <= n) {
    topk_heap_select(items, k, n);  // std::partial_sort
    topk_sort_heap(items, k);
  } else {
    topk_nth_element(items, items + (k - 1), items + n);
    topk_sort(items, items + (k - 1));
  }
}

}  // namespace tandem::gpu::TD_NS
