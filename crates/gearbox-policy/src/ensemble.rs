//! The compact tree-ensemble evaluator.
//!
//! **Layout.** Every reachable node of every tree is one 12-byte [`Node`] in a
//! single array, tree after tree, each tree level by level with a split's two
//! children side by side: a node keeps one child index and the step is
//! `left + went_right`, with no select and no second load. The top levels,
//! visited by every row, share a few cache lines.
//!
//! **Lock-step walk.** Trees are walked [`LANES`] at a time: each lane is an
//! independent chain of loads, so the CPU overlaps their latency instead of
//! waiting on one tree's next node. For a group of trees to take the same
//! number of steps, a leaf steps onto itself: its test reads a sentinel `-inf`
//! (always `< threshold`) and its left child is itself. The leaf's threshold
//! field carries its payload (the value's bits, or where its vector of values
//! starts).
//!
//! **Missing values.** Before walking, the row is copied into an *expanded*
//! row of `2F + 1` values: `2f` holds feature `f` with NaN replaced by `+inf`
//! (goes right at every threshold), `2f + 1` the same with NaN replaced by
//! `-inf` (goes left at every threshold), and `2F` the leaves' `-inf`. A split
//! reads slot `2f + default_left`, so the NaN rule costs nothing in the step.
//! This needs every threshold to be neither NaN nor `-inf` (the parser refuses
//! both). The copy lives on the stack for rows of up to [`STACK_FEATURES`]
//! features and in a reused per-thread buffer beyond.
//!
//! **Order of sums.** Sums are formed in `f32`, starting from the base margin
//! and adding trees in file order, as XGBoost's CPU predictor does; on the
//! shipped test vectors the margins agree with XGBoost 3.2 bit for bit.
//!
//! Rejected alternatives, measured here: one `if leaf { break }` walk per tree
//! ([`crate::ParsedModel::predict_naive`]) mispredicts a branch at almost every
//! node and serialises the loads (5-8x slower); 16-byte nodes with both child
//! indices and a select (LLVM turns the select into a load indexed by the
//! comparison, lengthening the chain); trees padded to complete trees with
//! children at `2p + 1` (LLVM packs the lanes into SSE registers and loses more
//! on shuffles than the smaller nodes save; padding inflates sparse trees);
//! AVX2 gathers (slower than scalar loads on these AMD cores); QuickScorer-style
//! bitvectors (pay off for thousands of trees, far more complex).

use std::cell::RefCell;
use std::path::Path;

use crate::error::{EvalError, FormatError, ModelError};
use crate::xgboost_json::{Objective, ParsedModel};

/// Trees walked together per row. Sixteen independent chains hide most of the
/// load latency of a model that spills out of L1; more spill registers.
pub const LANES: usize = 16;

/// Rows of up to this many features are expanded on the stack (1 KiB).
pub const STACK_FEATURES: usize = 128;

const SMALL_ROW: usize = 16;

/// One tree node, 12 bytes.
#[derive(Debug, Clone, Copy)]
#[repr(C)]
struct Node {
    /// Split: `2 * feature + default_left`, a slot of the expanded row.
    /// Leaf: `2 * num_features`, the expanded row's `-inf` sentinel.
    slot: u32,
    /// Split: go left when `x < threshold`. Leaf: the payload's bits (always
    /// greater than `-inf`: a finite value, or an offset below 2^30).
    threshold: f32,
    /// Split: the left child; the right child is `left + 1`. Leaf: itself.
    left: u32,
}

/// A tree ensemble laid out for fast evaluation.
#[derive(Debug, Clone)]
pub struct TreeEnsemble {
    objective: Objective,
    num_features: usize,
    num_trees: usize,
    /// Values per leaf: 1, or `num_outputs` for vector leaves.
    leaf_size: usize,
    /// Starting margin per output.
    base_margin: Vec<f32>,
    /// Output each tree adds to (scalar leaves).
    outputs: Vec<u32>,
    /// Vector leaves' values, `leaf_size` per leaf.
    leaf_vectors: Vec<f32>,
    nodes: Vec<Node>,
    /// Root node per tree, padded to a multiple of [`LANES`] with a dummy leaf.
    roots: Vec<u32>,
    /// Steps for each group of [`LANES`] trees: the depth of its deepest tree.
    group_depth: Vec<u32>,
    max_depth: u32,
}

thread_local! {
    /// Expanded rows wider than [`STACK_FEATURES`]; grows once per thread.
    static WIDE_ROW: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

impl TreeEnsemble {
    /// Lay out a validated model.
    pub fn from_parsed(model: &ParsedModel) -> Self {
        let leaf_size = model.leaf_size;
        let leaf_slot = 2 * model.num_features as u32;
        let total: usize = model.trees.iter().map(|t| t.reachable_nodes as usize).sum();
        let mut nodes = Vec::with_capacity(total + 1);
        let mut roots = Vec::with_capacity(model.trees.len().div_ceil(LANES) * LANES);
        let mut leaf_vectors = Vec::new();
        let leaf = |id: u32, payload: u32| Node {
            slot: leaf_slot,
            threshold: f32::from_bits(payload),
            left: id,
        };
        let mut new_id = Vec::new();
        let mut order = Vec::new();
        for tree in &model.trees {
            let base = nodes.len() as u32;
            roots.push(base);
            // Breadth-first from the root, children pushed in pairs so siblings
            // get consecutive ids. Unreachable (deleted) nodes are left out.
            order.clear();
            order.push(0usize);
            let mut k = 0;
            while k < order.len() {
                let i = order[k];
                if tree.left[i] >= 0 {
                    order.push(tree.left[i] as usize);
                    order.push(tree.right[i] as usize);
                }
                k += 1;
            }
            new_id.clear();
            new_id.resize(tree.left.len(), u32::MAX);
            for (k, &i) in order.iter().enumerate() {
                new_id[i] = base + k as u32;
            }
            for &i in &order {
                if tree.left[i] < 0 {
                    let payload = if leaf_size == 1 {
                        tree.leaf_values[i].to_bits()
                    } else {
                        let offset = leaf_vectors.len() as u32;
                        leaf_vectors.extend_from_slice(&tree.leaf_values[i * leaf_size..(i + 1) * leaf_size]);
                        offset
                    };
                    nodes.push(leaf(new_id[i], payload));
                } else {
                    nodes.push(Node {
                        slot: 2 * tree.feature[i] + u32::from(tree.default_left[i]),
                        threshold: tree.threshold[i],
                        left: new_id[tree.left[i] as usize],
                    });
                }
            }
        }
        // Padding lanes start on a leaf and never move; their value is never used.
        let pad = nodes.len() as u32;
        nodes.push(leaf(pad, 0));
        while roots.len() % LANES != 0 {
            roots.push(pad);
        }
        TreeEnsemble {
            objective: model.objective,
            num_features: model.num_features,
            num_trees: model.trees.len(),
            leaf_size,
            base_margin: model.base_margin.clone(),
            outputs: model.trees.iter().map(|t| t.output).collect(),
            leaf_vectors,
            nodes,
            roots,
            group_depth: model
                .trees
                .chunks(LANES)
                .map(|g| g.iter().map(|t| t.depth).max().unwrap_or(0))
                .collect(),
            max_depth: model.trees.iter().map(|t| t.depth).max().unwrap_or(0),
        }
    }

    /// Parse, validate and lay out a model document.
    pub fn from_json_slice(bytes: &[u8]) -> Result<Self, FormatError> {
        Ok(Self::from_parsed(&ParsedModel::from_slice(bytes)?))
    }

    /// Read a model file (no sidecar; see [`crate::Model::load`] for that).
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ModelError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| ModelError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_json_slice(&bytes).map_err(|e| ModelError::format(path, e))
    }

    /// The objective.
    pub fn objective(&self) -> Objective {
        self.objective
    }

    /// Values a row must have.
    pub fn num_features(&self) -> usize {
        self.num_features
    }

    /// Values a prediction has.
    pub fn num_outputs(&self) -> usize {
        self.base_margin.len()
    }

    /// Number of trees.
    pub fn num_trees(&self) -> usize {
        self.num_trees
    }

    /// Depth of the deepest tree (edges from root to leaf).
    pub fn max_depth(&self) -> u32 {
        self.max_depth
    }

    /// Nodes of all trees (reachable from their roots).
    pub fn num_nodes(&self) -> usize {
        self.nodes.len() - 1
    }

    /// Predict one row: probabilities for classifiers (`binary:logistic`: one
    /// value, P(class 1)), the value for regression. `row` holds
    /// [`num_features`](Self::num_features) values in model order (NaN =
    /// missing); `out` takes [`num_outputs`](Self::num_outputs) values. Does not
    /// allocate.
    pub fn predict(&self, row: &[f32], out: &mut [f32]) -> Result<(), EvalError> {
        self.predict_margin(row, out)?;
        apply_link(self.objective, out);
        Ok(())
    }

    /// Like [`predict`](Self::predict) but stops before the link function:
    /// XGBoost's `output_margin=True` (base margin plus the sum of leaf values).
    /// For a forest this is the same as `predict` (the mean class probabilities).
    pub fn predict_margin(&self, row: &[f32], out: &mut [f32]) -> Result<(), EvalError> {
        if row.len() != self.num_features {
            return Err(EvalError::RowLength {
                expected: self.num_features,
                got: row.len(),
            });
        }
        if out.len() != self.base_margin.len() {
            return Err(EvalError::OutputLength {
                expected: self.base_margin.len(),
                got: out.len(),
            });
        }
        out.copy_from_slice(&self.base_margin);
        let n = 2 * row.len() + 1;
        // Two stack sizes, so that small rows do not clear a whole KiB.
        if row.len() <= SMALL_ROW {
            let mut expanded = [0f32; 2 * SMALL_ROW + 1];
            expand(row, &mut expanded[..n]);
            self.accumulate(&expanded[..n], out);
        } else if row.len() <= STACK_FEATURES {
            let mut expanded = [0f32; 2 * STACK_FEATURES + 1];
            expand(row, &mut expanded[..n]);
            self.accumulate(&expanded[..n], out);
        } else {
            WIDE_ROW.with(|buffer| match buffer.try_borrow_mut() {
                Ok(mut expanded) => {
                    expanded.resize(n, 0.0);
                    expand(row, &mut expanded);
                    self.accumulate(&expanded, out);
                }
                // Only reachable if a leaf callback re-entered; never here.
                Err(_) => {
                    let mut expanded = vec![0.0; n];
                    expand(row, &mut expanded);
                    self.accumulate(&expanded, out);
                }
            });
        }
        if let Objective::ForestProba { .. } = self.objective {
            let n = self.num_trees as f32;
            out.iter_mut().for_each(|o| *o /= n);
        }
        Ok(())
    }

    /// Predict many rows: `rows` is row-major, `num_features` values per row;
    /// `out` gets `num_outputs` values per row, in the same order.
    pub fn predict_batch(&self, rows: &[f32], out: &mut [f32]) -> Result<(), EvalError> {
        let (f, k) = (self.num_features, self.num_outputs());
        if rows.len() % f != 0 {
            return Err(EvalError::RowLength {
                expected: f,
                got: rows.len() % f,
            });
        }
        let n = rows.len() / f;
        if out.len() != n * k {
            return Err(EvalError::OutputLength {
                expected: n * k,
                got: out.len(),
            });
        }
        for (row, o) in rows.chunks_exact(f).zip(out.chunks_exact_mut(k)) {
            self.predict(row, o)?;
        }
        Ok(())
    }

    /// Add every tree's leaf to `out`, in tree order. `values` is the expanded row.
    #[inline(always)]
    fn accumulate(&self, values: &[f32], out: &mut [f32]) {
        let n = self.num_trees;
        if self.leaf_size == 1 && out.len() == 1 {
            // One output (binary, regression): keep the running sum in a
            // register. Summing through `out[0]` would put a store and a reload
            // on the serial chain of additions, one per tree.
            let mut sum = out[0];
            self.walk(values, |t, payload| {
                if t < n {
                    sum += f32::from_bits(payload);
                }
            });
            out[0] = sum;
        } else if self.leaf_size == 1 {
            let outputs = self.outputs.as_slice();
            self.walk(values, |t, payload| {
                if let Some(&o) = outputs.get(t) {
                    out[o as usize] += f32::from_bits(payload);
                }
            });
        } else {
            let k = self.leaf_size;
            let vectors = self.leaf_vectors.as_slice();
            self.walk(values, |t, payload| {
                if t < n {
                    let values = &vectors[payload as usize..payload as usize + k];
                    out.iter_mut().zip(values).for_each(|(o, v)| *o += v);
                }
            });
        }
    }

    /// Walk every tree for the expanded row `values` and hand each tree's leaf
    /// payload to `leaf`, in tree order (padding lanes included: the caller
    /// stops at the real tree count).
    #[inline(always)]
    fn walk(&self, values: &[f32], mut leaf: impl FnMut(usize, u32)) {
        let nodes = self.nodes.as_slice();
        debug_assert_eq!(values.len(), 2 * self.num_features + 1);
        for (g, (group, &depth)) in self.roots.chunks_exact(LANES).zip(&self.group_depth).enumerate() {
            let mut at = [0u32; LANES];
            at.copy_from_slice(group);
            for _ in 0..depth {
                for lane in at.iter_mut() {
                    debug_assert!((*lane as usize) < nodes.len());
                    // SAFETY: `at` starts at a root and only moves to a split's
                    // `left` or `left + 1` or stays on a leaf; `from_parsed`
                    // built all of these as indices into `nodes` from a tree the
                    // parser validated (children in range, no cycles).
                    let node = unsafe { nodes.get_unchecked(*lane as usize) };
                    debug_assert!((node.slot as usize) < values.len());
                    // SAFETY: split slots are 2 * feature + 1 at most, with
                    // feature < num_features (checked by the parser); leaf slots
                    // are 2 * num_features; `values` has 2 * num_features + 1
                    // entries (checked by `predict_margin`).
                    let x = unsafe { *values.get_unchecked(node.slot as usize) };
                    // Neither side is NaN here (expanded rows have none; split
                    // thresholds and leaf payloads are not NaN), so `x >= t` is
                    // exactly "not x < t": go right.
                    *lane = node.left.wrapping_add(u32::from(x >= node.threshold));
                }
            }
            for (lane, &at) in at.iter().enumerate() {
                leaf(g * LANES + lane, nodes[at as usize].threshold.to_bits());
            }
        }
    }
}

/// The expanded row (see the module docs): `out.len() == 2 * row.len() + 1`.
#[inline(always)]
fn expand(row: &[f32], out: &mut [f32]) {
    for (pair, &x) in out.chunks_exact_mut(2).zip(row) {
        let nan = x.is_nan();
        pair[0] = if nan { f32::INFINITY } else { x };
        pair[1] = if nan { f32::NEG_INFINITY } else { x };
    }
    if let Some(last) = out.last_mut() {
        *last = f32::NEG_INFINITY;
    }
}

/// Margins to predictions, in `f32` as XGBoost computes them.
pub(crate) fn apply_link(objective: Objective, out: &mut [f32]) {
    match objective {
        Objective::BinaryLogistic => {
            for o in out.iter_mut() {
                *o = 1.0 / (1.0 + (-*o).exp());
            }
        }
        Objective::MultiSoftprob { .. } => {
            let max = out.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0.0f32;
            for o in out.iter_mut() {
                *o = (*o - max).exp();
                sum += *o;
            }
            out.iter_mut().for_each(|o| *o /= sum);
        }
        Objective::SquaredError | Objective::ForestProba { .. } => {}
    }
}
