package workflow

import (
	"fmt"

	"go.yaml.in/yaml/v3"
)

// fitWorkers refuses a workflow that parses but that no worker could read.
// A job carries its workflow encoded (Encode: every default written out on
// every action, schema files inlined), and a worker reads that with Decode,
// under the same bounds as a file. The encoded form is larger than the
// file, so a file within MaxExpandedNodes can encode past it (a long
// pipeline, schemas shared by many actions): such a workflow was
// validated, published, and then served by no worker. So the file is
// checked as a worker will read it, by the worker's own Decode, and
// refused here with the line of its actions.
func (p *parser) fitWorkers(w *Workflow) {
	enc, err := w.Encode()
	if err != nil {
		p.errorf(p.actionsLine, "actions", "%v", err)
		return
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(enc, &doc); err != nil {
		p.errorf(p.actionsLine, "actions", "workers could not read this workflow as a job carries it: %v", err)
		return
	}
	if n, _ := countNodes(&doc, MaxExpandedNodes); n > MaxExpandedNodes {
		p.errorf(p.actionsLine, "actions", "%s", encodedTooLarge(w, &doc))
		return
	}
	if _, err := Decode(enc); err != nil {
		// Encode and Decode disagree: a bug, but said here rather than
		// by every worker once the job is published.
		p.errorf(p.actionsLine, "actions", "workers could not read this workflow as a job carries it: %v", err)
	}
}

// encodedTooLarge says how large the encoded workflow (doc) is, and which
// of its actions is the largest.
func encodedTooLarge(w *Workflow, doc *yaml.Node) string {
	total, _ := countNodes(doc, 1<<62)
	msg := fmt.Sprintf("as a job carries it to workers (every default written out on each action, schemas inlined), "+
		"this workflow is %d YAML nodes, more than the %d a worker reads: ", total, MaxExpandedNodes)
	acts := encodedActions(doc)
	if len(acts) != len(w.Actions) {
		return msg + "use fewer actions, or smaller schemas"
	}
	big, most := 0, 0
	for i, a := range acts {
		if n, _ := countNodes(a, 1<<62); n > most {
			big, most = i, n
		}
	}
	avg := total / len(acts)
	msg += fmt.Sprintf("use fewer actions (it has %d, of about %d nodes each", len(acts), avg)
	if most >= 2*avg {
		msg += fmt.Sprintf("; the largest, actions[%d] at line %d, is %d", big, w.Actions[big].Line, most)
	}
	return msg + "), or smaller schemas"
}

// encodedActions is the actions list of an encoded workflow's document.
func encodedActions(doc *yaml.Node) []*yaml.Node {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil
	}
	for _, kv := range pairs(doc.Content[0]) {
		if kv[0].Value == "actions" && kv[1].Kind == yaml.SequenceNode {
			return kv[1].Content
		}
	}
	return nil
}
