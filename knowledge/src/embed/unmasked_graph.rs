//! Removes the attention-mask addition from a BERT-style encoder graph, for sessions that run
//! one text per call.
//!
//! A BERT export turns `attention_mask` into an additive bias once (`(1 - mask) × min_float`,
//! shaped `[batch, 1, 1, seq]`), and every layer adds it to its `[batch, heads, seq, seq]`
//! attention scores before the softmax. A call with one text has no padding: its mask is all
//! ones, the bias all zeros, and the additions change nothing, yet each one is a pass over
//! `heads × seq²` scores (12 × 258² floats per layer for a 258-token chunk). Sessions that only
//! ever run one text per call (queries; documents with `embeddings.document_batch_size` 1) load
//! the graph without those additions: each softmax reads the scaled scores directly. The vectors
//! are the same: the removed operations added zeros (cosine 1.0 against the unmodified
//! bge-small-en-v1.5 graph, `tests/models_embedding.rs`).
//!
//! Without the additions ONNX Runtime would fuse each residual `Add` with its `LayerNormalization`
//! into `SkipLayerNormalization`, which is slower on this CPU than the two apart; the embedder's
//! sessions turn that fusion off (`onnx::EMBEDDER_DISABLED_OPTIMIZERS`).
//!
//! Recognised: Hugging Face BERT exports, where every layer's `/encoder/layer.N/attention/self/Add`
//! adds one tensor, computed from the `attention_mask` input alone, to scores computed in the
//! layer, and only `Softmax` nodes read the sum. Any other graph is kept as it is, with the
//! reason.

use std::collections::{BTreeSet, HashSet};

use super::onnx_proto::{
    GRAPH_INITIALIZER, GRAPH_INPUT, GRAPH_OUTPUT, GraphEdits, ParsedModel, Reroute, layer_of,
};

/// The graph input the bias is computed from.
const MASK_INPUT: &str = "attention_mask";

/// The edits that remove `parsed`'s attention-mask additions, or why the graph is kept as it
/// is: each layer's `Add` goes, and what read its sum reads the scores instead.
pub(crate) fn edits(parsed: &ParsedModel) -> Result<GraphEdits, String> {
    let mut edits = GraphEdits::default();
    for removal in find(parsed)? {
        edits.drop.insert(removal.add);
        for (node, reader) in parsed.nodes.iter().enumerate() {
            if reader.inputs.contains(&removal.sum) {
                edits.reroute.push(Reroute {
                    node,
                    from: removal.sum.clone(),
                    to: removal.scores.clone(),
                });
            }
        }
    }
    Ok(edits)
}

/// One layer's mask addition: the `Add` node, the scores it reads, the sum it writes.
#[derive(Debug)]
struct Removal {
    add: usize,
    scores: String,
    sum: String,
}

/// Every layer's mask addition, or why the graph is not recognised.
fn find(parsed: &ParsedModel) -> Result<Vec<Removal>, String> {
    let nodes = &parsed.nodes;
    let layers: BTreeSet<usize> = nodes.iter().filter_map(|n| layer_of(&n.name)).collect();
    if layers.is_empty() {
        return Err("no node is named /encoder/layer.N/… (not a Hugging Face BERT export)".into());
    }
    let graph_outputs = parsed.names(GRAPH_OUTPUT)?;
    let mut bias: Option<&str> = None;
    let mut removals = Vec::with_capacity(layers.len());
    for layer in layers {
        let prefix = format!("/encoder/layer.{layer}/");
        let name = format!("{prefix}attention/self/Add");
        let add = nodes
            .iter()
            .position(|n| n.name == name && n.op_type == "Add")
            .ok_or(format!("no Add node {name}"))?;
        let in_layer = |tensor: &str| {
            parsed
                .producer_of(tensor)
                .is_some_and(|p| nodes[p].name.starts_with(&prefix))
        };
        let (scores, mask) = match nodes[add].inputs.as_slice() {
            [a, b] if in_layer(a) && !in_layer(b) => (a, b),
            [a, b] if in_layer(b) && !in_layer(a) => (b, a),
            _ => {
                return Err(format!(
                    "{name} does not add one tensor from outside its layer to scores from inside"
                ));
            }
        };
        match bias {
            None => {
                check_mask_only(parsed, mask)?;
                bias = Some(mask);
            }
            Some(first) if first == mask => {}
            Some(first) => {
                return Err(format!(
                    "{name} adds {mask}, the other layers {first}: not one mask bias"
                ));
            }
        }
        let [sum] = nodes[add].outputs.as_slice() else {
            return Err(format!("{name} does not have one output"));
        };
        let readers: Vec<&str> = nodes
            .iter()
            .filter(|n| n.inputs.contains(sum))
            .map(|n| n.op_type.as_str())
            .collect();
        if readers.is_empty()
            || readers.iter().any(|op| *op != "Softmax")
            || graph_outputs.contains(sum)
        {
            return Err(format!("{name}'s sum is read by more than Softmax nodes"));
        }
        removals.push(Removal {
            add,
            scores: scores.clone(),
            sum: sum.clone(),
        });
    }
    Ok(removals)
}

/// Checks that `tensor` is computed from the `attention_mask` input and constants alone (no
/// other input of the graph reaches it), so that an all-ones mask makes it the same for every
/// text: the zeros of `(1 - mask) × min_float`.
fn check_mask_only(parsed: &ParsedModel, tensor: &str) -> Result<(), String> {
    let initializers: HashSet<String> = parsed.names(GRAPH_INITIALIZER)?.into_iter().collect();
    let data_inputs: HashSet<String> = parsed
        .names(GRAPH_INPUT)?
        .into_iter()
        .filter(|name| !initializers.contains(name))
        .collect();
    let mut seen = HashSet::new();
    let mut pending = vec![tensor.to_string()];
    let mut reads_mask = false;
    while let Some(current) = pending.pop() {
        if !seen.insert(current.clone()) {
            continue;
        }
        if data_inputs.contains(&current) {
            if current != MASK_INPUT {
                return Err(format!(
                    "the mask bias {tensor} also depends on the input {current}"
                ));
            }
            reads_mask = true;
            continue;
        }
        if let Some(producer) = parsed.producer_of(&current) {
            pending.extend(
                parsed.nodes[producer]
                    .inputs
                    .iter()
                    .filter(|input| !input.is_empty())
                    .cloned(),
            );
        }
    }
    if reads_mask {
        Ok(())
    } else {
        Err(format!(
            "the added tensor {tensor} is not computed from {MASK_INPUT}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::super::onnx_proto::put_bytes;
    use super::super::onnx_proto::test_graph::{
        assert_nodes_copied, assert_other_fields_survive, graph_nodes, model as skeleton, node,
        node_names, rewrite_with,
    };
    use super::*;

    fn rewrite(model: &[u8]) -> Result<Vec<u8>, String> {
        rewrite_with(model, edits)
    }

    // The rewrite of the real bge-small-en-v1.5 graph, run through ONNX Runtime against the
    // unmodified one, is tested in `tests/models_embedding.rs`.

    fn value_info(name: &str) -> Vec<u8> {
        let mut v = Vec::new();
        put_bytes(&mut v, 1, name.as_bytes());
        v
    }

    /// The attention of a two-layer BERT export: the mask bias computed once from `mask_from`
    /// (`attention_mask` in a real export), each layer's scores, the bias added, then read by
    /// `Softmax` (by `second_layer_reader` in the second layer).
    fn model(mask_from: &str, second_layer_reader: &str) -> Vec<u8> {
        let mut nodes = vec![
            node("/Cast", "Cast", &[mask_from], &["/Cast_output_0"]),
            node(
                "/Mul",
                "Mul",
                &["/Cast_output_0", "min"],
                &["/Mul_output_0"],
            ),
        ];
        for (layer, reader) in [(0, "Softmax"), (1, second_layer_reader)] {
            let p = format!("/encoder/layer.{layer}/attention/self/");
            let scores = format!("{p}Div_output_0");
            let sum = format!("{p}Add_output_0");
            let input = if layer == 0 {
                "input_ids".to_string()
            } else {
                "/encoder/layer.0/attention/self/Softmax_output_0".to_string()
            };
            nodes.push(node(&format!("{p}Div"), "Div", &[&input, "c"], &[&scores]));
            nodes.push(node(
                &format!("{p}Add"),
                "Add",
                &[&scores, "/Mul_output_0"],
                &[&sum],
            ));
            nodes.push(node(
                &format!("{p}Softmax"),
                reader,
                &[&sum],
                &[&format!("{p}Softmax_output_0")],
            ));
        }
        let mut extra = Vec::new();
        for input in ["input_ids", "attention_mask", "min"] {
            put_bytes(&mut extra, GRAPH_INPUT, &value_info(input));
        }
        let mut initializer = Vec::new();
        put_bytes(&mut initializer, 8, b"min");
        put_bytes(&mut extra, GRAPH_INITIALIZER, &initializer);
        put_bytes(
            &mut extra,
            GRAPH_OUTPUT,
            &value_info("/encoder/layer.1/attention/self/Softmax_output_0"),
        );
        skeleton(&nodes, &extra, 11)
    }

    #[test]
    fn every_softmax_reads_the_scores_without_the_mask_bias() {
        let original = model("attention_mask", "Softmax");
        let rewritten = rewrite(&original).expect("recognised");
        let nodes = graph_nodes(&rewritten);
        assert_eq!(
            node_names(&nodes),
            [
                "/Cast",
                "/Mul",
                "/encoder/layer.0/attention/self/Div",
                "/encoder/layer.0/attention/self/Softmax",
                "/encoder/layer.1/attention/self/Div",
                "/encoder/layer.1/attention/self/Softmax",
            ],
            "the two additions are gone, nothing else"
        );
        assert_eq!(nodes[3].2, ["/encoder/layer.0/attention/self/Div_output_0"]);
        assert_eq!(nodes[5].2, ["/encoder/layer.1/attention/self/Div_output_0"]);
        assert_nodes_copied(&original, &nodes, (2, 2), 3);
        assert_other_fields_survive(&original, &rewritten);
    }

    #[test]
    fn graphs_it_does_not_recognise_are_kept_with_the_reason() {
        let other_input = rewrite(&model("input_ids", "Softmax")).unwrap_err();
        assert!(
            other_input.contains("depends on the input input_ids"),
            "{other_input}"
        );
        let other_reader = rewrite(&model("attention_mask", "Relu")).unwrap_err();
        assert!(
            other_reader.contains("read by more than Softmax"),
            "{other_reader}"
        );
        let not_bert = skeleton(&[node("/pooler/dense", "Gemm", &["x"], &["y"])], &[], 17);
        assert!(
            rewrite(&not_bert)
                .unwrap_err()
                .contains("not a Hugging Face BERT export")
        );
        for garbage in [&b"\x3a\xff\xff\xff\xff\x0f"[..], b"\x0b", b"not a model"] {
            assert!(rewrite(garbage).is_err(), "garbage is refused, not a panic");
        }
    }
}
