//! Hostile and ordinary PDF fixtures, written byte by byte so tests need no PDF library: a
//! minimal PDF writer with a correct cross-reference table ([`pdf`], [`one_page`],
//! [`text_pages`]) and a zlib stream that inflates to gigabytes while taking a few MB
//! ([`zlib_bomb`]).

use flate2::{Compress, Compression, FlushCompress};

const MIB: usize = 1024 * 1024;

/// One PDF object: a dictionary, or a stream (its dictionary's entries without `/Length`, and
/// its raw data).
pub enum PdfObject {
    Dict(String),
    Stream(String, Vec<u8>),
}

/// A PDF file (object `i + 1` is `objects[i]`, object 1 the catalog) with a correct
/// cross-reference table.
pub fn pdf(objects: &[PdfObject]) -> Vec<u8> {
    let mut pdf = b"%PDF-1.5\n%\xE2\xE3\xCF\xD3\n".to_vec();
    let mut offsets = Vec::new();
    for (i, object) in objects.iter().enumerate() {
        offsets.push(pdf.len());
        pdf.extend_from_slice(format!("{} 0 obj\n", i + 1).as_bytes());
        match object {
            PdfObject::Dict(dict) => pdf.extend_from_slice(dict.as_bytes()),
            PdfObject::Stream(dict, data) => {
                pdf.extend_from_slice(
                    format!("<< {dict} /Length {} >>\nstream\n", data.len()).as_bytes(),
                );
                pdf.extend_from_slice(data);
                pdf.extend_from_slice(b"\nendstream");
            }
        }
        pdf.extend_from_slice(b"\nendobj\n");
    }
    let xref = pdf.len();
    pdf.extend_from_slice(
        format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes(),
    );
    for offset in offsets {
        pdf.extend_from_slice(format!("{offset:010} 00000 n \n").as_bytes());
    }
    pdf.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    pdf
}

/// A one-page PDF whose page draws `contents` (references, e.g. `5 0 R`) with font F1
/// (object 4); `extra` objects follow from object 5.
pub fn one_page(contents: &str, extra: Vec<PdfObject>) -> Vec<u8> {
    let mut objects = vec![
        PdfObject::Dict("<< /Type /Catalog /Pages 2 0 R >>".into()),
        PdfObject::Dict("<< /Type /Pages /Kids [3 0 R] /Count 1 >>".into()),
        PdfObject::Dict(format!(
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> /Contents {contents} >>"
        )),
        PdfObject::Dict("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".into()),
    ];
    objects.extend(extra);
    pdf(&objects)
}

/// A PDF of one Helvetica text page per entry of `pages`; each line of an entry is drawn on a
/// line of its own (PDF string escapes applied). An empty entry is a page without text.
pub fn text_pages(pages: &[&str]) -> Vec<u8> {
    let kids: Vec<String> = (0..pages.len())
        .map(|i| format!("{} 0 R", 4 + 2 * i))
        .collect();
    let mut objects = vec![
        PdfObject::Dict("<< /Type /Catalog /Pages 2 0 R >>".into()),
        PdfObject::Dict(format!(
            "<< /Type /Pages /Kids [{}] /Count {} >>",
            kids.join(" "),
            pages.len()
        )),
        PdfObject::Dict("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".into()),
    ];
    for (i, text) in pages.iter().enumerate() {
        objects.push(PdfObject::Dict(format!(
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents {} 0 R >>",
            5 + 2 * i
        )));
        let mut content = String::new();
        for (line, words) in text.lines().enumerate() {
            let escaped = words
                .replace('\\', "\\\\")
                .replace('(', "\\(")
                .replace(')', "\\)");
            content.push_str(&format!(
                "BT /F1 12 Tf 72 {} Td ({escaped}) Tj ET\n",
                720 - 20 * line
            ));
        }
        objects.push(PdfObject::Stream(String::new(), content.into_bytes()));
    }
    pdf(&objects)
}

/// A zlib stream inflating to `mib` MiB of zeros, built in milliseconds: one fully flushed
/// deflate block of 1 MiB of zeros repeated, a final empty block, the right Adler-32.
pub fn zlib_bomb(mib: usize) -> Vec<u8> {
    let mut compress = Compress::new(Compression::best(), false);
    let mut block = Vec::with_capacity(64 * 1024);
    compress
        .compress_vec(&vec![0u8; MIB], &mut block, FlushCompress::Full)
        .expect("deflate");
    assert_eq!(
        compress.total_in(),
        MIB as u64,
        "one call takes the whole MiB"
    );
    let mut out = vec![0x78, 0xDA];
    for _ in 0..mib {
        out.extend_from_slice(&block);
    }
    out.extend_from_slice(&[0x03, 0x00]); // final fixed-Huffman block holding only end-of-block
    // Adler-32 of n zeros: a stays 1, b adds 1 per byte.
    let b = ((mib as u64 * MIB as u64) % 65_521) as u32;
    out.extend_from_slice(&((b << 16) | 1).to_be_bytes());
    out
}
