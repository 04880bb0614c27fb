/**
 * The readable diff an admin approves an upstream tool's definition from, as the console shows
 * it (console/src/format.ts): indented JSON with invisible characters spelled `⟨U+FE0F⟩`, so a
 * change made only of invisible characters is a line that differs where a reader can see it.
 */
import { structuredPatch } from 'diff';

/**
 * Characters a reader cannot see or tell from a space: controls, format characters (bidi
 * overrides, zero-width ones, the tag block), every default-ignorable code point (variation
 * selectors, Hangul fillers), line and paragraph separators, spaces other than U+0020,
 * private-use and unassigned code points. The same set as the console's.
 */
const INVISIBLE =
  /(?![\n ])[\p{Cc}\p{Cf}\p{Default_Ignorable_Code_Point}\p{Zl}\p{Zp}\p{Zs}\p{Co}\p{Cn}]/gu;

/** `text` with every invisible character written as `⟨U+FE0F⟩`; a plain space stays. */
export function visibleText(text: string): string {
  return text.replace(
    INVISIBLE,
    (c) => `⟨U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}⟩`,
  );
}

/** A definition as it is compared: indented JSON, invisible characters spelled out. */
export const visibleJson = (v: unknown): string =>
  visibleText(JSON.stringify(v, null, 2) ?? 'undefined');

/**
 * Unified diff lines (`--- approved`, `+++ current`, `@@ … @@`, then ` `/`-`/`+` lines, three
 * lines of context) from the approved definition to the current one. Without an approved one
 * (a tool never approved) every line of the current definition is `+`. No change: no lines.
 */
export function definitionDiff(approved: unknown, current: unknown): string[] {
  const before = approved === undefined ? '' : `${visibleJson(approved)}\n`;
  const after = `${visibleJson(current)}\n`;
  const patch = structuredPatch('approved', 'current', before, after, undefined, undefined, {
    context: 3,
  });
  if (patch.hunks.length === 0) return [];
  const lines = ['--- approved', '+++ current'];
  // As diff(1) writes a range: an empty side starts at the line before it (`-0,0`).
  const range = (start: number, n: number) => `${n === 0 ? start - 1 : start},${n}`;
  for (const h of patch.hunks) {
    lines.push(`@@ -${range(h.oldStart, h.oldLines)} +${range(h.newStart, h.newLines)} @@`);
    lines.push(...h.lines);
  }
  return lines;
}
