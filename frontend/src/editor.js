// The code editor: CodeMirror 6 with Python highlighting, indentation, Tab, line numbers, bracket
// matching and undo (basicSetup), named "exercise code" for screen readers. Tab indents (Escape,
// then Tab, leaves the editor: CodeMirror's own rule). Ctrl+Enter is the page's (main.js).
import { indentWithTab } from "@codemirror/commands";
import { indentUnit } from "@codemirror/language";
import { python } from "@codemirror/lang-python";
import { EditorState, RangeSet, StateEffect, StateField } from "@codemirror/state";
import { Decoration, GutterMarker, keymap, lineNumberMarkers } from "@codemirror/view";
import { EditorView, basicSetup } from "codemirror";

// The line the last check's first failure points to (a syntax error, the line that raised): marked
// in the gutter and the text until the learner edits the file or the next check ends.
const setMarkedLine = StateEffect.define();
class FailureMarker extends GutterMarker {
  constructor() {
    super();
    this.elementClass = "cm-failure-gutter";
  }
}
const failureMarker = new FailureMarker();
const markedLine = StateField.define({
  create: () => null,                       // the marked line's start, or null
  update(value, tr) {
    for (const effect of tr.effects) if (effect.is(setMarkedLine)) value = effect.value;
    return tr.docChanged ? null : value;
  },
  provide: (field) => [
    EditorView.decorations.from(field, (at) =>
      at === null ? Decoration.none
                  : Decoration.set([Decoration.line({ class: "cm-failure-line", attributes: { title: "the first failure points here" } }).range(at)])),
    lineNumberMarkers.from(field, (at) => (at === null ? RangeSet.empty : RangeSet.of([failureMarker.range(at)]))),
  ],
});

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
    markedLine,
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
    // Mark line ``n`` (1-based) as the one the first failure points to; null (or a line the file
    // no longer has) clears the mark.
    markLine(n) {
      const doc = view.state.doc;
      const at = Number.isInteger(n) && n >= 1 && n <= doc.lines ? doc.line(n).from : null;
      view.dispatch({ effects: setMarkedLine.of(at) });
    },
  };
}
