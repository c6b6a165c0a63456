//! Reading and writing just enough of an ONNX file (`onnx.proto`'s `ModelProto`, protobuf) to
//! rewrite its graph: node names, op types, inputs and outputs, opset versions, graph inputs.
//! Every other field is kept as the bytes it was read from, so a rewrite never loses what it does
//! not understand (generated `onnx.proto` types would drop fields the vendored schema lacks).
//! The graph rewrites (`cls_graph`, `unmasked_graph`) each plan [`GraphEdits`] on one
//! [`ParsedModel`]; the embedder merges the plans and [`ParsedModel::apply`] writes the model
//! once.

use std::collections::HashSet;

use prost::bytes::Buf;
use prost::encoding::{WireType, decode_key, decode_varint, encode_key, encode_varint};

/// `ModelProto` fields.
pub(super) const MODEL_OPSET_IMPORT: u32 = 8;
pub(super) const MODEL_GRAPH: u32 = 7;
/// `OperatorSetIdProto` fields.
pub(super) const OPSET_DOMAIN: u32 = 1;
pub(super) const OPSET_VERSION: u32 = 2;
/// `GraphProto` fields.
pub(super) const GRAPH_NODE: u32 = 1;
pub(super) const GRAPH_INITIALIZER: u32 = 5;
pub(super) const GRAPH_INPUT: u32 = 11;
pub(super) const GRAPH_OUTPUT: u32 = 12;
/// `ValueInfoProto.name`.
const VALUE_INFO_NAME: u32 = 1;
/// `NodeProto` fields.
pub(super) const NODE_INPUT: u32 = 1;
pub(super) const NODE_OUTPUT: u32 = 2;
pub(super) const NODE_NAME: u32 = 3;
pub(super) const NODE_OP_TYPE: u32 = 4;
/// `TensorProto` fields and the INT64 element type.
const TENSOR_DIMS: u32 = 1;
const TENSOR_DATA_TYPE: u32 = 2;
const TENSOR_NAME: u32 = 8;
const TENSOR_RAW_DATA: u32 = 9;
const TENSOR_INT64: u64 = 7;

/// `N` of a node named `/encoder/layer.N/…`, as Hugging Face BERT exports (`optimum`,
/// `torch.onnx`) name the nodes of encoder layer N.
pub(super) fn layer_of(name: &str) -> Option<usize> {
    let rest = name.strip_prefix("/encoder/layer.")?;
    let (number, _) = rest.split_once('/')?;
    number.parse().ok()
}

/// Changes to a graph's nodes, by index in the original graph: what a rewrite plans, what
/// [`ParsedModel::apply`] writes. Plans of several rewrites merge with [`GraphEdits::merge`].
#[derive(Debug, Default)]
pub(super) struct GraphEdits {
    /// Nodes left out.
    pub drop: HashSet<usize>,
    /// Inputs a node reads from another tensor.
    pub reroute: Vec<Reroute>,
    /// Encoded nodes written right after a node (in this order).
    pub insert_after: Vec<(usize, Vec<u8>)>,
    /// Encoded initializers appended to the graph.
    pub initializers: Vec<Vec<u8>>,
}

/// Node `node` reads `to` where it read `from`.
#[derive(Debug)]
pub(super) struct Reroute {
    pub node: usize,
    pub from: String,
    pub to: String,
}

impl GraphEdits {
    pub fn merge(&mut self, other: GraphEdits) {
        self.drop.extend(other.drop);
        self.reroute.extend(other.reroute);
        self.insert_after.extend(other.insert_after);
        self.initializers.extend(other.initializers);
    }
}

/// A model split into what a rewrite reads: the model's fields, its graph's fields, the graph's
/// nodes in order (borrowing the file's bytes).
pub(super) struct ParsedModel<'a> {
    pub model: Vec<Field<'a>>,
    pub graph: Vec<Field<'a>>,
    pub nodes: Vec<Node<'a>>,
}

impl<'a> ParsedModel<'a> {
    pub fn parse(bytes: &'a [u8]) -> Result<Self, String> {
        let model = fields(bytes)?;
        let graph = fields(single(&model, MODEL_GRAPH, "the model has no graph")?.payload)?;
        let nodes = graph
            .iter()
            .filter(|f| f.number == GRAPH_NODE)
            .map(|f| Node::parse(f.payload))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            model,
            graph,
            nodes,
        })
    }

    /// Names of the graph's inputs (`GRAPH_INPUT`), outputs (`GRAPH_OUTPUT`) or initializers
    /// (`GRAPH_INITIALIZER`).
    pub fn names(&self, number: u32) -> Result<Vec<String>, String> {
        let name_field = if number == GRAPH_INITIALIZER {
            TENSOR_NAME
        } else {
            VALUE_INFO_NAME
        };
        let mut names = Vec::new();
        for field in self.graph.iter().filter(|f| f.number == number) {
            if let Some(name) = fields(field.payload)?
                .iter()
                .find(|f| f.number == name_field)
            {
                names.push(
                    std::str::from_utf8(name.payload)
                        .map_err(|_| "a graph value has a name that is not UTF-8".to_string())?
                        .to_string(),
                );
            }
        }
        Ok(names)
    }

    /// Index of the node that outputs `tensor`.
    pub fn producer_of(&self, tensor: &str) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.outputs.iter().any(|o| o == tensor))
    }

    /// The model with `edits` applied to its graph, in one pass over the original bytes.
    pub fn apply(&self, edits: &GraphEdits) -> Result<Vec<u8>, String> {
        let size: usize = self.graph.iter().map(|f| f.raw.len()).sum();
        let mut graph = Vec::with_capacity(size + 1024);
        let mut index = 0;
        for field in &self.graph {
            if field.number != GRAPH_NODE {
                graph.extend_from_slice(field.raw);
                continue;
            }
            if !edits.drop.contains(&index) {
                let reroutes: Vec<(&str, &str)> = edits
                    .reroute
                    .iter()
                    .filter(|r| r.node == index)
                    .map(|r| (r.from.as_str(), r.to.as_str()))
                    .collect();
                if reroutes.is_empty() {
                    graph.extend_from_slice(field.raw);
                } else {
                    let node = self.nodes[index].with_inputs_replaced(&reroutes)?;
                    put_bytes(&mut graph, GRAPH_NODE, &node);
                }
            }
            for (_, node) in edits.insert_after.iter().filter(|(at, _)| *at == index) {
                put_bytes(&mut graph, GRAPH_NODE, node);
            }
            index += 1;
        }
        for initializer in &edits.initializers {
            put_bytes(&mut graph, GRAPH_INITIALIZER, initializer);
        }
        Ok(self.with_graph(&graph))
    }

    /// The model's bytes with `graph` (an encoded `GraphProto`) in place of its graph.
    fn with_graph(&self, graph: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(graph.len() + 1024);
        for field in &self.model {
            if field.number == MODEL_GRAPH {
                put_bytes(&mut out, MODEL_GRAPH, graph);
            } else {
                out.extend_from_slice(field.raw);
            }
        }
        out
    }
}

/// The node names, inputs and outputs of one `NodeProto`, and its bytes.
#[derive(Debug)]
pub(super) struct Node<'a> {
    pub raw: &'a [u8],
    pub name: String,
    pub op_type: String,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
}

impl<'a> Node<'a> {
    pub fn parse(raw: &'a [u8]) -> Result<Self, String> {
        let mut node = Node {
            raw,
            name: String::new(),
            op_type: String::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
        };
        for field in fields(raw)? {
            let text = || {
                std::str::from_utf8(field.payload)
                    .map(str::to_string)
                    .map_err(|_| "a node has a name that is not UTF-8".to_string())
            };
            match field.number {
                NODE_INPUT => node.inputs.push(text()?),
                NODE_OUTPUT => node.outputs.push(text()?),
                NODE_NAME => node.name = text()?,
                NODE_OP_TYPE => node.op_type = text()?,
                _ => {}
            }
        }
        Ok(node)
    }

    /// The node's bytes with every input equal to a `from` read as its `to` instead.
    pub fn with_inputs_replaced(&self, replacements: &[(&str, &str)]) -> Result<Vec<u8>, String> {
        let mut out = Vec::with_capacity(self.raw.len() + 64);
        for field in fields(self.raw)? {
            let replacement = (field.number == NODE_INPUT)
                .then(|| {
                    replacements
                        .iter()
                        .find(|(from, _)| field.payload == from.as_bytes())
                })
                .flatten();
            match replacement {
                Some((_, to)) => put_bytes(&mut out, NODE_INPUT, to.as_bytes()),
                None => out.extend_from_slice(field.raw),
            }
        }
        Ok(out)
    }
}

/// A one-element INT64 initializer.
pub(super) fn int64_tensor(name: &str, value: i64) -> Vec<u8> {
    let mut tensor = Vec::new();
    put_varint(&mut tensor, TENSOR_DIMS, 1);
    put_varint(&mut tensor, TENSOR_DATA_TYPE, TENSOR_INT64);
    put_bytes(&mut tensor, TENSOR_NAME, name.as_bytes());
    put_bytes(&mut tensor, TENSOR_RAW_DATA, &value.to_le_bytes());
    tensor
}

pub(super) fn put_bytes(out: &mut Vec<u8>, number: u32, payload: &[u8]) {
    encode_key(number, WireType::LengthDelimited, out);
    encode_varint(payload.len() as u64, out);
    out.extend_from_slice(payload);
}

pub(super) fn put_varint(out: &mut Vec<u8>, number: u32, value: u64) {
    encode_key(number, WireType::Varint, out);
    encode_varint(value, out);
}

/// One field of a protobuf message as it was read.
#[derive(Debug)]
pub(super) struct Field<'a> {
    pub number: u32,
    /// The whole field: key and value, to copy it unchanged.
    pub raw: &'a [u8],
    /// The value of a length-delimited field (empty otherwise).
    pub payload: &'a [u8],
    /// The value of a varint field (0 otherwise).
    pub varint: u64,
}

/// The fields of one message, in order.
pub(super) fn fields(message: &[u8]) -> Result<Vec<Field<'_>>, String> {
    let malformed = |e: &dyn std::fmt::Display| format!("the model is not valid protobuf: {e}");
    let mut fields = Vec::new();
    let mut rest = message;
    while rest.has_remaining() {
        let start = message.len() - rest.len();
        let (number, wire) = decode_key(&mut rest).map_err(|e| malformed(&e))?;
        let (mut payload, mut varint) = (&[][..], 0);
        match wire {
            WireType::Varint => varint = decode_varint(&mut rest).map_err(|e| malformed(&e))?,
            WireType::SixtyFourBit | WireType::ThirtyTwoBit => {
                let width = if wire == WireType::SixtyFourBit { 8 } else { 4 };
                if rest.len() < width {
                    return Err(malformed(&"a fixed-width field runs past the end"));
                }
                rest.advance(width);
            }
            WireType::LengthDelimited => {
                let len = decode_varint(&mut rest).map_err(|e| malformed(&e))?;
                let len = usize::try_from(len)
                    .ok()
                    .filter(|&len| len <= rest.len())
                    .ok_or_else(|| malformed(&"a field runs past the end"))?;
                payload = &rest[..len];
                rest.advance(len);
            }
            WireType::StartGroup | WireType::EndGroup => {
                return Err(malformed(&"groups are not used by onnx.proto"));
            }
        }
        let end = message.len() - rest.len();
        fields.push(Field {
            number,
            raw: &message[start..end],
            payload,
            varint,
        });
    }
    Ok(fields)
}

pub(super) fn single<'f, 'a>(
    fields: &'f [Field<'a>],
    number: u32,
    missing: &str,
) -> Result<&'f Field<'a>, String> {
    let mut matching = fields.iter().filter(|f| f.number == number);
    match (matching.next(), matching.next()) {
        (Some(field), None) => Ok(field),
        (None, _) => Err(missing.to_string()),
        (Some(_), Some(_)) => Err(format!("the model repeats field {number}")),
    }
}

/// Skeleton graphs for the rewrites' unit tests.
#[cfg(test)]
pub(super) mod test_graph {
    use super::*;

    /// A node carrying an attribute no rewrite reads (it must survive byte for byte).
    pub fn node(name: &str, op: &str, inputs: &[&str], outputs: &[&str]) -> Vec<u8> {
        let mut n = Vec::new();
        for i in inputs {
            put_bytes(&mut n, NODE_INPUT, i.as_bytes());
        }
        for o in outputs {
            put_bytes(&mut n, NODE_OUTPUT, o.as_bytes());
        }
        put_bytes(&mut n, NODE_NAME, name.as_bytes());
        put_bytes(&mut n, NODE_OP_TYPE, op.as_bytes());
        put_bytes(&mut n, 5, ATTRIBUTE);
        n
    }

    /// The attribute `node` adds (`axis = 1`).
    pub const ATTRIBUTE: &[u8] = b"\x0a\x04axis\x20\x01";

    /// A model (IR 8, default-domain `opset`) whose graph holds `nodes`, a name
    /// (`graph-name`) and the already encoded graph fields `extra`.
    pub fn model(nodes: &[Vec<u8>], extra: &[u8], opset: u64) -> Vec<u8> {
        let mut graph = Vec::new();
        for n in nodes {
            put_bytes(&mut graph, GRAPH_NODE, n);
        }
        put_bytes(&mut graph, 2, b"graph-name");
        graph.extend_from_slice(extra);
        let mut opset_id = Vec::new();
        put_varint(&mut opset_id, OPSET_VERSION, opset);
        let mut out = Vec::new();
        put_varint(&mut out, 1, 8); // ir_version
        put_bytes(&mut out, MODEL_OPSET_IMPORT, &opset_id);
        put_bytes(&mut out, MODEL_GRAPH, &graph);
        out
    }

    /// `model` rewritten by one rewrite's plan alone.
    pub fn rewrite_with(
        model: &[u8],
        plan: fn(&ParsedModel) -> Result<GraphEdits, String>,
    ) -> Result<Vec<u8>, String> {
        let parsed = ParsedModel::parse(model)?;
        parsed.apply(&plan(&parsed)?)
    }

    /// Name, op type, inputs and bytes of each node of `model`'s graph, in order.
    pub fn graph_nodes(model: &[u8]) -> Vec<(String, String, Vec<String>, Vec<u8>)> {
        ParsedModel::parse(model)
            .expect("a model")
            .nodes
            .into_iter()
            .map(|n| (n.name, n.op_type, n.inputs, n.raw.to_vec()))
            .collect()
    }

    /// The nodes' names, in order.
    pub fn node_names(nodes: &[(String, String, Vec<String>, Vec<u8>)]) -> Vec<&str> {
        nodes.iter().map(|n| n.0.as_str()).collect()
    }

    /// Node `untouched.0` of the rewritten `nodes` is node `untouched.1` of `original` byte
    /// for byte, and the rewritten node `changed` still carries the [`ATTRIBUTE`] field.
    pub fn assert_nodes_copied(
        original: &[u8],
        nodes: &[(String, String, Vec<String>, Vec<u8>)],
        untouched: (usize, usize),
        changed: usize,
    ) {
        let before = graph_nodes(original);
        assert_eq!(
            nodes[untouched.0].3, before[untouched.1].3,
            "untouched nodes are copied byte for byte"
        );
        assert!(
            nodes[changed]
                .3
                .windows(ATTRIBUTE.len())
                .any(|w| w == ATTRIBUTE),
            "a rewritten node keeps the fields it does not change"
        );
    }

    /// The payloads of `rewritten`'s graph fields numbered `number`.
    pub fn graph_fields(rewritten: &[u8], number: u32) -> Vec<Vec<u8>> {
        ParsedModel::parse(rewritten)
            .expect("a model")
            .graph
            .iter()
            .filter(|f| f.number == number)
            .map(|f| f.payload.to_vec())
            .collect()
    }

    /// What a rewrite does not touch came through: the graph's name, the model's first field.
    pub fn assert_other_fields_survive(original: &[u8], rewritten: &[u8]) {
        assert_eq!(
            graph_fields(rewritten, 2),
            [b"graph-name".to_vec()],
            "other graph fields survive"
        );
        assert_eq!(
            fields(rewritten).expect("fields")[0].raw,
            fields(original).expect("fields")[0].raw
        );
    }
}
