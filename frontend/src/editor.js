// The code editor: CodeMirror 6 with Python highlighting, indentation, Tab, line numbers, bracket
// matching and undo (basicSetup), named "exercise code" for screen readers. Tab indents (Escape,
// then Tab, leaves the editor: CodeMirror's own rule). Ctrl+Enter is the page's (main.js).
import { indentWithTab } from "@codemirror/commands";
import { indentUnit } from "@codemirror/language";
import { python } from "@codemirror/lang-python";
import { EditorState } from "@codemirror/state";
import { keymap } from "@codemirror/view";
import { EditorView, basicSetup } from "codemirror";

export function makeEditor(parent, { onChange, nonce }) {
  let loading = false;   // a text set by setText() is not the learner's edit: it is not saved back
  const extensions = [
    EditorView.cspNonce.of(nonce || ""),
    basicSetup,
    keymap.of([indentWithTab]),
    python(),
    EditorState.tabSize.of(4),
    indentUnit.of("    "),   // Python's four spaces (CodeMirror's default is two)
    EditorView.contentAttributes.of({ "aria-label": "exercise code" }),
    EditorView.updateListener.of((update) => {
      if (update.docChanged && !loading) onChange();
    }),
  ];
  const view = new EditorView({ parent, state: EditorState.create({ doc: "", extensions }) });
  return {
    view,
    text: () => view.state.doc.toString(),
    // Replace the whole text (an exercise opened, a reload, the stub restored): a fresh state, so
    // undo never steps back into another file's text.
    setText(text) {
      loading = true;
      try {
        view.setState(EditorState.create({ doc: text, extensions }));
      } finally {
        loading = false;
      }
    },
    focus: () => view.focus(),
  };
}
