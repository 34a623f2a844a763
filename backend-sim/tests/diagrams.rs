//! Trace pictures: the SVG sequence diagram of a run is well-formed XML and shows the CM
//! messages as arrows between the right lifelines, lost messages and faults marked.

use cmtwin::Transport;
use cmtwin_sim::scenarios::connect_teardown;
use cmtwin_sim::sweep::RunContext;
use cmtwin_sim::{sequence_diagram, FaultAction, FaultPlan, MessageKind, Trigger};

/// The SVG of the connect-teardown scenario on RoCE with seed 3 and `plan`.
fn diagram(plan: FaultPlan) -> String {
    let ctx = RunContext::new(3, plan);
    connect_teardown(&ctx, Transport::Roce).expect("the scenario holds");
    sequence_diagram(&ctx.trace().expect("a fabric was built"))
}

/// Checks that `xml` is well-formed: every tag closed in order, attributes quoted, text and
/// attribute values free of raw `<` and of `&` outside entities. Returns the element count.
fn well_formed(xml: &str) -> Result<usize, String> {
    let mut open: Vec<&str> = Vec::new();
    let mut elements = 0;
    let mut rest = xml;
    let check_text = |t: &str| -> Result<(), String> {
        for (i, _) in t.match_indices('&') {
            let entity = &t[i..t[i..].find(';').map_or(t.len(), |e| i + e + 1)];
            if !["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"].contains(&entity) {
                return Err(format!("bare & in {t:?}"));
            }
        }
        Ok(())
    };
    while let Some(start) = rest.find('<') {
        check_text(&rest[..start])?;
        let end = rest[start..].find('>').ok_or("unclosed tag")? + start;
        let tag = &rest[start + 1..end];
        if tag.contains('<') {
            return Err(format!("< inside tag {tag:?}"));
        }
        if let Some(name) = tag.strip_prefix('/') {
            match open.pop() {
                Some(o) if o == name => {}
                other => return Err(format!("</{name}> closes {other:?}")),
            }
        } else {
            let self_closing = tag.ends_with('/');
            let body = tag.trim_end_matches('/');
            let name = body.split_whitespace().next().ok_or("empty tag")?;
            if body.matches('"').count() % 2 != 0 {
                return Err(format!("unbalanced quotes in {tag:?}"));
            }
            check_text(body)?;
            elements += 1;
            if !self_closing {
                open.push(name);
            }
        }
        rest = &rest[end + 1..];
    }
    if !rest.trim().is_empty() || !open.is_empty() {
        return Err(format!("unclosed elements {open:?}"));
    }
    Ok(elements)
}

/// The message groups of `svg`: (class, kind, from, to), in order.
fn messages(svg: &str) -> Vec<(String, String, String, String)> {
    let attr = |line: &str, name: &str| -> String {
        let key = format!("{name}=\"");
        let at = line.find(&key).expect("attribute") + key.len();
        line[at..at + line[at..].find('"').expect("closing quote")].to_string()
    };
    svg.lines()
        .filter(|l| l.starts_with("<g class=\"message"))
        .map(|l| {
            (
                attr(l, "class"),
                attr(l, "data-kind"),
                attr(l, "data-from"),
                attr(l, "data-to"),
            )
        })
        .collect()
}

fn m(class: &str, kind: &str, from: &str, to: &str) -> (String, String, String, String) {
    (class.into(), kind.into(), from.into(), to.into())
}

#[test]
fn a_connect_and_disconnect_is_the_req_rep_rtu_dreq_drep_ladder() {
    let svg = diagram(FaultPlan::new());
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(well_formed(&svg).unwrap() > 50);
    assert_eq!(
        messages(&svg),
        [
            m("message", "REQ", "client", "server"),
            m("message", "REP", "server", "client"),
            m("message", "RTU", "client", "server"),
            m("message", "DREQ", "client", "server"),
            m("message", "DREP", "server", "client"),
        ]
    );
    // Lifelines in order of appearance, calls and events as notes.
    assert!(svg.contains(r#"<text class="host" x="250" y="34">server</text>"#));
    assert!(svg.contains(r#"<text class="host" x="510" y="34">client</text>"#));
    assert!(svg.contains("rdma_connect(id4) -&gt; 0</text>"));
    assert!(svg.contains(">RDMA_CM_EVENT_ESTABLISHED status 0 on id6 (0 bytes)</text>"));
    assert!(!svg.contains("EAGAIN"), "unproductive polls are left out");
}

#[test]
fn lost_messages_and_faults_are_marked() {
    let plan = FaultPlan::new().scheduled(
        Trigger::Message {
            kind: MessageKind::Rep,
            nth: 1,
        },
        FaultAction::DropMessages {
            kind: MessageKind::Rep,
            count: 1,
        },
    );
    let svg = diagram(plan);
    well_formed(&svg).unwrap();
    assert_eq!(
        messages(&svg),
        [
            m("message", "REQ", "client", "server"),
            m("message lost", "REP", "server", "client"),
            m("message", "REP", "server", "client"),
            m("message", "RTU", "client", "server"),
            m("message", "DREQ", "client", "server"),
            m("message", "DREP", "server", "client"),
        ]
    );
    assert!(svg.contains("<text class=\"fault\""));
    assert!(svg.contains("fault plan #1 fires: on REP #1: drop the next 1 REP</text>"));
    assert!(svg.contains("<title>REP ep7 -&gt; ep5</title>"));
}

#[test]
fn text_is_escaped() {
    let records = vec![cmtwin_sim::TraceRecord {
        time: cmtwin_sim::SimTime(5),
        host: "a<&>\"'".into(),
        kind: cmtwin_sim::TraceKind::Fault,
        text: "x < y & z".into(),
    }];
    let svg = sequence_diagram(&records);
    well_formed(&svg).unwrap();
    assert!(svg.contains("a&lt;&amp;&gt;&quot;&apos;"));
    assert!(svg.contains("x &lt; y &amp; z"));
}
