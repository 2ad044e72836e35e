//! OpenAPI transport details the document builder (`apiserver-semantics`) does not cover.

/// `/openapi/v2` as the gnostic `openapi_v2.Document` protobuf (what kubectl ≤1.27 asks for with
/// `Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf`): swagger, info and empty
/// paths/definitions. kubectl then falls back to its compiled-in patch metadata for built-ins and
/// to merge patches for custom resources, as it does against servers without a schema for a kind.
pub fn v2_protobuf() -> Vec<u8> {
    fn field(out: &mut Vec<u8>, num: u8, bytes: &[u8]) {
        out.push((num << 3) | 2);
        // Lengths here are < 128, a single varint byte.
        out.push(bytes.len() as u8);
        out.extend_from_slice(bytes);
    }
    let mut info = Vec::new();
    field(&mut info, 1, b"Kubernetes");
    field(&mut info, 2, b"v1.34.0");
    let mut doc = Vec::new();
    field(&mut doc, 1, b"2.0");
    field(&mut doc, 2, &info);
    field(&mut doc, 8, &[]);
    field(&mut doc, 9, &[]);
    doc
}
