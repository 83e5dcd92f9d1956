# Team gateway: install this developer's client configs on Windows, or check them (the doctor).
#   & ([scriptblock]::Create((irm PORTAL/connect/install.ps1))) -Token <download-token>
#   & ([scriptblock]::Create((irm PORTAL/connect/install.ps1))) -Check <client>
#   & ([scriptblock]::Create((irm PORTAL/connect/install.ps1))) -Uninstall <client>|all [-Yes]
# Existing files are merged, never replaced, after a timestamped backup; files holding a key are
# readable by the current user only. Windows PowerShell 5.1 or PowerShell 7.
param([string]$Token = "", [string]$Check = "", [string]$Uninstall = "", [switch]$Yes)
$ErrorActionPreference = "Stop"
$Portal = __PORTAL__
$Gateway = __GATEWAY__
$Probes = __PROBES__ | ConvertFrom-Json
$Messages = __MESSAGES__ | ConvertFrom-Json
$Specs = __UNINSTALL__ | ConvertFrom-Json
$Begin = "# >>> team-gateway models (managed by the portal installer; edits here are replaced)"
$End = "# <<< team-gateway models"

function Expand-TeamPath([string]$p) {
  if ($p.StartsWith("~/")) { $p = Join-Path $env:USERPROFILE ($p.Substring(2) -replace "/", "\") }
  return [Environment]::ExpandEnvironmentVariables($p)
}

function Convert-TeamText([string]$text) {
  # As install.py's translate: the portal's templates ({name} stands for a value), most specific first.
  foreach ($t in @($Messages.PSObject.Properties | Sort-Object { -($_.Name -replace '\{\w+\}', '').Length })) {
    $names = @([regex]::Matches($t.Name, '\{(\w+)\}') | ForEach-Object { $_.Groups[1].Value })
    $pattern = '^' + (([regex]::Escape($t.Name)) -replace '\\\{(\w+)}', '(?<$1>.+?)') + '$'
    $m = [regex]::Match($text, $pattern, 'Singleline')
    if ($m.Success) { $out = $t.Value; foreach ($n in $names) { $out = $out.Replace("{$n}", $m.Groups[$n].Value) }; return $out }
  }
  return $text
}

function Write-Host([string]$Object) {
  # Every message goes out in the developer's language: its symbol stays, the rest is translated.
  if ($Object -match '^(\+|x|\.|!|->) (.*)$') { $Object = "$($Matches[1]) $(Convert-TeamText $Matches[2])" }
  Microsoft.PowerShell.Utility\Write-Host $Object
}

function ConvertTo-Table($o) {
  # PSCustomObject from ConvertFrom-Json -> ordered hashtables, so merging is plain key assignment.
  if ($o -is [System.Management.Automation.PSCustomObject]) {
    $h = [ordered]@{}
    foreach ($p in $o.PSObject.Properties) { $h[$p.Name] = ConvertTo-Table $p.Value }
    return $h
  }
  if ($o -is [System.Collections.IEnumerable] -and -not ($o -is [string])) { return ,@($o | ForEach-Object { ConvertTo-Table $_ }) }
  return $o
}

# --- JSONC: JSON with comments and trailing commas (Zed's and VS Code's settings.json) ------------
# A line-by-line mirror of install.py's jsonc_* functions and edit_json: every JSON file is read as
# JSONC, the merge computes the new data, and only the members whose value changed are rewritten in
# the text; comments, formatting, the user's entries and trailing commas stay byte for byte.

function New-JsoncError([string]$text, [int]$at, [string]$what) {
  $line = ([regex]::Matches($text.Substring(0, $at), "`n")).Count + 1
  $column = $at - (Get-LineStart $text $at) + 1
  return "not JSON, even with comments: line $line column ${column}: $what"
}

function Get-JsoncTokens([string]$text) {
  # As install.py's jsonc_tokens: @(kind, start, end) each; kind one of {}[]:, "s" (a string) or "v".
  $tokens = New-Object System.Collections.ArrayList; $i = 0; $n = $text.Length
  if ($n -gt 0 -and [int]$text[0] -eq 0xFEFF) { $i = 1 }
  while ($i -lt $n) {
    $c = $text[$i]
    if (" `t`r`n".IndexOf($c) -ge 0) { $i++ }
    elseif ($c -eq '/' -and $i + 1 -lt $n -and $text[$i + 1] -eq '/') { $j = $text.IndexOf([char]10, $i); if ($j -lt 0) { $i = $n } else { $i = $j } }
    elseif ($c -eq '/' -and $i + 1 -lt $n -and $text[$i + 1] -eq '*') {
      $j = $text.IndexOf("*/", $i + 2, [StringComparison]::Ordinal)
      if ($j -lt 0) { throw (New-JsoncError $text $i "a /* comment is not closed") }
      $i = $j + 2
    }
    elseif ($c -eq '"') {
      $j = $i + 1
      while ($j -lt $n -and $text[$j] -ne '"' -and $text[$j] -ne "`n") { if ($text[$j] -eq '\') { $j += 2 } else { $j++ } }
      if ($j -ge $n -or $text[$j] -ne '"') { throw (New-JsoncError $text $i "a string is not closed on its line") }
      [void]$tokens.Add(@("s", $i, ($j + 1))); $i = $j + 1
    }
    elseif ("{}[]:,".IndexOf($c) -ge 0) { [void]$tokens.Add(@([string]$c, $i, ($i + 1))); $i++ }
    else {
      $j = $i
      while ($j -lt $n -and ([char]::IsLetterOrDigit($text[$j]) -or "+-.".IndexOf($text[$j]) -ge 0)) { $j++ }
      if ($j -eq $i) { throw (New-JsoncError $text $i "unexpected '$c'") }
      [void]$tokens.Add(@("v", $i, $j)); $i = $j
    }
  }
  return ,$tokens
}

function Get-JsoncValue([string]$text, $tokens, [int]$i) {
  # As install.py's jsonc_value: @{ node; next }. A node: @{ kind; start; end; members }, a member
  # @(key or $null, start, value node, comma offset or -1).
  if ($i -ge $tokens.Count) { throw (New-JsoncError $text $text.Length "the text ends where a value should be") }
  $kind = $tokens[$i][0]; $start = $tokens[$i][1]; $end = $tokens[$i][2]
  if ($kind -ceq "s" -or $kind -ceq "v") { return @{ node = @{ kind = $kind; start = $start; end = $end }; next = $i + 1 } }
  if ($kind -ne "{" -and $kind -ne "[") { throw (New-JsoncError $text $start "expected a value, found '$kind'") }
  $close = if ($kind -eq "{") { "}" } else { "]" }
  $node = @{ kind = $kind; start = $start; end = -1; members = (New-Object System.Collections.ArrayList) }
  $i++
  while ($true) {
    if ($i -ge $tokens.Count) { throw (New-JsoncError $text $text.Length "'$close' is missing") }
    if ($tokens[$i][0] -eq $close) { $node.end = $tokens[$i][2]; return @{ node = $node; next = $i + 1 } }
    $key = $null; $at = $tokens[$i][1]
    if ($kind -eq "{") {
      if ($tokens[$i][0] -cne "s") { throw (New-JsoncError $text $at "expected a property name in double quotes") }
      $key = [regex]::Unescape($text.Substring($tokens[$i][1] + 1, $tokens[$i][2] - $tokens[$i][1] - 2))  # json.loads of the name
      if ($i + 1 -ge $tokens.Count -or $tokens[$i + 1][0] -ne ":") { throw (New-JsoncError $text $tokens[$i][2] "expected ':' after the property name") }
      $i += 2
    }
    $found = Get-JsoncValue $text $tokens $i; $i = $found.next
    $comma = -1
    if ($i -lt $tokens.Count -and $tokens[$i][0] -eq ",") { $comma = $tokens[$i][1]; $i++ }
    elseif ($i -lt $tokens.Count -and $tokens[$i][0] -ne $close) { throw (New-JsoncError $text $tokens[$i][1] "expected ',' or '$close'") }
    [void]$node.members.Add(@($key, $at, $found.node, $comma))
  }
}

function ConvertFrom-JsoncText([string]$text) {
  # As install.py's jsonc_parse: @{ root; data }, the data read by ConvertFrom-Json from the same
  # text with its comments, trailing commas and byte order mark blanked out.
  $tokens = Get-JsoncTokens $text
  $found = Get-JsoncValue $text $tokens 0
  if ($found.next -lt $tokens.Count) { throw (New-JsoncError $text $tokens[$found.next][1] "more text after the end of the JSON value") }
  $plain = New-Object System.Text.StringBuilder ([regex]::Replace($text, "[^`n]", " "))
  for ($k = 0; $k -lt $tokens.Count; $k++) {
    $t = $tokens[$k]
    if ($t[0] -eq "," -and $k + 1 -lt $tokens.Count -and ($tokens[$k + 1][0] -eq "}" -or $tokens[$k + 1][0] -eq "]")) { continue }
    [void]$plain.Remove($t[1], $t[2] - $t[1]).Insert($t[1], $text.Substring($t[1], $t[2] - $t[1]))
  }
  try { $data = ConvertTo-Table ($plain.ToString() | ConvertFrom-Json) } catch { throw "not JSON, even with comments: $($_.Exception.Message)" }
  return @{ root = $found.node; data = $data }
}

function ConvertFrom-Jsonc([string]$text) { return (ConvertFrom-JsoncText $text).data }

function Test-JsonSame($a, $b) {
  # As install.py's same: equal JSON values, key order aside.
  if ($a -is [System.Collections.IDictionary] -and $b -is [System.Collections.IDictionary]) {
    if ($a.Count -ne $b.Count) { return $false }
    foreach ($k in @($a.Keys)) { if (-not $b.Contains($k) -or -not (Test-JsonSame $a[$k] $b[$k])) { return $false } }
    return $true
  }
  if ($a -is [System.Collections.IList] -and $b -is [System.Collections.IList]) {
    if ($a.Count -ne $b.Count) { return $false }
    for ($i = 0; $i -lt $a.Count; $i++) { if (-not (Test-JsonSame $a[$i] $b[$i])) { return $false } }
    return $true
  }
  if ($null -eq $a -or $null -eq $b) { return ($null -eq $a -and $null -eq $b) }
  return ($a.GetType() -eq $b.GetType()) -and ($a -ceq $b)
}

function Get-LineStart([string]$text, [int]$i) { if ($i -le 0) { return 0 }; return $text.LastIndexOf([char]10, $i - 1) + 1 }

function Get-LineEnd([string]$text, [int]$i) { $j = $text.IndexOf([char]10, $i); if ($j -lt 0) { return $text.Length }; return $j }

function Get-IndentAt([string]$text, [int]$start) {
  $j = $start; while ($j -lt $text.Length -and ($text[$j] -eq ' ' -or $text[$j] -eq "`t")) { $j++ }
  return $text.Substring($start, $j - $start)
}

function Test-Blank([string]$s) { return $s.Trim(" `t`r`n".ToCharArray()) -eq "" }

function Get-Slice([string]$text, [int]$from, [int]$to) { return $text.Substring($from, $to - $from) }

function Get-JsoncLayout([string]$text, $root) {
  # As install.py's jsonc_layout: @(newline, indent unit).
  $newline = if ($text.Contains("`r`n")) { "`r`n" } else { "`n" }
  $queue = New-Object System.Collections.ArrayList; [void]$queue.Add($root)
  while ($queue.Count) {
    $node = $queue[0]; $queue.RemoveAt(0)
    if ($node.kind -ne "{" -and $node.kind -ne "[") { continue }
    if ($node.kind -eq "{" -and $node.members.Count) {
      $at = $node.members[0][1]; $ls = Get-LineStart $text $at
      $outer = Get-IndentAt $text (Get-LineStart $text $node.start); $inner = Get-Slice $text $ls $at
      if ((Test-Blank $inner) -and $inner.Length -gt $outer.Length -and $inner.StartsWith($outer)) { return @($newline, $inner.Substring($outer.Length)) }
    }
    foreach ($m in $node.members) { [void]$queue.Add($m[2]) }
  }
  return @($newline, "  ")
}

function Format-JsonString([string]$s) {
  # As Python's json.dumps(s, ensure_ascii=False).
  $b = New-Object System.Text.StringBuilder; [void]$b.Append('"')
  foreach ($c in $s.ToCharArray()) {
    $n = [int]$c
    if ($n -eq 34) { [void]$b.Append('\"') } elseif ($n -eq 92) { [void]$b.Append('\\') }
    elseif ($n -eq 10) { [void]$b.Append('\n') } elseif ($n -eq 13) { [void]$b.Append('\r') } elseif ($n -eq 9) { [void]$b.Append('\t') }
    elseif ($n -eq 8) { [void]$b.Append('\b') } elseif ($n -eq 12) { [void]$b.Append('\f') }
    elseif ($n -lt 32) { [void]$b.Append(('\u{0:x4}' -f $n)) } else { [void]$b.Append($c) }
  }
  [void]$b.Append('"'); return $b.ToString()
}

function ConvertTo-PyJson($v, $unit, [string]$pad) {
  # As Python's json.dumps(v, indent=unit, ensure_ascii=False), the lines after the first at $pad;
  # $unit $null: on one line, as json.dumps(v, ensure_ascii=False).
  $inv = [Globalization.CultureInfo]::InvariantCulture
  if ($null -eq $v) { return "null" }
  if ($v -is [bool]) { if ($v) { return "true" }; return "false" }
  if ($v -is [string]) { return Format-JsonString $v }
  if ($v -is [datetime]) { return Format-JsonString ($v.ToUniversalTime().ToString("yyyy-MM-dd'T'HH:mm:ss.fff'Z'", $inv)) }  # PowerShell 7 reads ISO strings as dates
  $isMap = $v -is [System.Collections.IDictionary]
  if ($isMap -or $v -is [System.Collections.IList]) {
    $open, $close = if ($isMap) { "{", "}" } else { "[", "]" }
    if ($v.Count -eq 0) { return $open + $close }
    $inner = if ($null -ne $unit) { $pad + $unit } else { "" }
    $parts = New-Object System.Collections.ArrayList
    if ($isMap) { foreach ($k in @($v.Keys)) { [void]$parts.Add((Format-JsonString ([string]$k)) + ": " + (ConvertTo-PyJson $v[$k] $unit $inner)) } }
    else { foreach ($item in $v) { [void]$parts.Add((ConvertTo-PyJson $item $unit $inner)) } }
    if ($null -eq $unit) { return $open + ($parts -join ", ") + $close }
    return $open + "`n" + $inner + ($parts -join (",`n" + $inner)) + "`n" + $pad + $close
  }
  if ($v -is [double] -or $v -is [single] -or $v -is [decimal]) {
    $s = ([double]$v).ToString("R", $inv).Replace("E", "e")
    if ($s -notmatch '[.eN]') { $s += ".0" }  # Python writes a float as 1.0
    return $s
  }
  return [string]::Format($inv, "{0}", $v)
}

function ConvertTo-JsoncValue($value, [string]$indent, $unit, [string]$newline) {
  # As install.py's jsonc_dump.
  if ($null -eq $unit) { return ConvertTo-PyJson $value $null "" }
  return (ConvertTo-PyJson $value $unit "").Replace("`n", $newline + $indent)
}

function Find-JsoncNode($root, $path) {
  $node = $root
  foreach ($key in @($path)) { $node = (Find-JsoncMember $node $key)[2] }
  return $node
}

function Find-JsoncMember($node, [string]$key) {
  # The last member named $key (ConvertFrom-Json, like json.loads, keeps the last).
  $found = $null
  foreach ($m in $node.members) { if ($m[0] -ceq $key) { $found = $m } }
  return ,$found
}

function Remove-JsoncMember([string]$text, $path, [string]$key) {
  # As install.py's jsonc_remove.
  $node = Find-JsoncNode (ConvertFrom-JsoncText $text).root $path
  $members = $node.members; $k = -1
  for ($i = 0; $i -lt $members.Count; $i++) { if ($members[$i][0] -ceq $key) { $k = $i } }
  $at = $members[$k][1]; $value = $members[$k][2]; $comma = $members[$k][3]
  $end = if ($comma -ge 0) { $comma + 1 } else { $value.end }
  $ls = Get-LineStart $text $at; $le = Get-LineEnd $text $end
  $rest = (Get-Slice $text $end $le).Trim(" `t`r".ToCharArray())
  $last = $k -eq $members.Count - 1
  if ((Test-Blank (Get-Slice $text $ls $at)) -and ($rest -eq "" -or $rest.StartsWith("//"))) { $cut = @($ls, [Math]::Min($le + 1, $text.Length)) }
  elseif ($last) { $s = $at; while ($s -gt 0 -and ($text[$s - 1] -eq ' ' -or $text[$s - 1] -eq "`t")) { $s-- }; $cut = @($s, $end) }
  else { $e = $end; while ($e -lt $text.Length -and ($text[$e] -eq ' ' -or $text[$e] -eq "`t")) { $e++ }; $cut = @($at, $e) }
  $text = $text.Substring(0, $cut[0]) + $text.Substring($cut[1])
  if ($last -and $comma -lt 0 -and $k -gt 0 -and $members[$k - 1][3] -ge 0) {
    $before = $members[$k - 1][3]; $text = $text.Substring(0, $before) + $text.Substring($before + 1)
  }
  if ($members.Count -eq 1) {
    $node = Find-JsoncNode (ConvertFrom-JsoncText $text).root $path
    $body = Get-Slice $text ($node.start + 1) ($node.end - 1)
    if ($body -and (Test-Blank $body)) { $text = $text.Substring(0, $node.start + 1) + $text.Substring($node.end - 1) }
  }
  return $text
}

function Add-JsoncMember([string]$text, $path, [string]$key, $value) {
  # As install.py's jsonc_add.
  $root = (ConvertFrom-JsoncText $text).root
  $newline, $unit = Get-JsoncLayout $text $root
  $node = Find-JsoncNode $root $path
  $members = $node.members; $close = $node.end - 1; $cls = Get-LineStart $text $close
  $name = (Format-JsonString $key) + ": "
  $last = if ($members.Count) { $members[$members.Count - 1] } else { $null }
  if ((Test-Blank (Get-Slice $text $cls $close)) -and $cls -gt $node.start) {
    $first = if ($members.Count) { $members[0][1] } else { -1 }
    if ($members.Count -and (Test-Blank (Get-Slice $text (Get-LineStart $text $first) $first))) { $indent = Get-Slice $text (Get-LineStart $text $first) $first }
    else { $indent = (Get-IndentAt $text $cls) + $unit }
    $comma = if ($null -ne $last -and $last[3] -ge 0) { "," } else { "" }
    $line = $indent + $name + (ConvertTo-JsoncValue $value $indent $unit $newline) + $comma + $newline
    $text = $text.Substring(0, $cls) + $line + $text.Substring($cls)
    if ($null -ne $last -and $last[3] -lt 0) { $text = $text.Substring(0, $last[2].end) + "," + $text.Substring($last[2].end) }
  }
  elseif ($null -eq $last -and (Test-Blank (Get-Slice $text ($node.start + 1) $close))) {
    $outer = Get-IndentAt $text (Get-LineStart $text $node.start); $indent = $outer + $unit
    $body = $newline + $indent + $name + (ConvertTo-JsoncValue $value $indent $unit $newline) + $newline + $outer
    $text = $text.Substring(0, $node.start + 1) + $body + $text.Substring($close)
  }
  elseif ($null -eq $last) { $at = $node.start + 1; $text = $text.Substring(0, $at) + $name + (ConvertTo-JsoncValue $value "" $null $newline) + $text.Substring($at) }
  elseif ($last[3] -ge 0) { $at = $last[3] + 1; $text = $text.Substring(0, $at) + " " + $name + (ConvertTo-JsoncValue $value "" $null $newline) + "," + $text.Substring($at) }
  else { $at = $last[2].end; $text = $text.Substring(0, $at) + ", " + $name + (ConvertTo-JsoncValue $value "" $null $newline) + $text.Substring($at) }
  return $text
}

function Set-JsoncMember([string]$text, $path, [string]$key, $value) {
  # As install.py's jsonc_set.
  $root = (ConvertFrom-JsoncText $text).root
  $newline, $unit = Get-JsoncLayout $text $root
  $m = Find-JsoncMember (Find-JsoncNode $root $path) $key
  $at = $m[1]; $node = $m[2]; $ls = Get-LineStart $text $at
  $pad = Get-Slice $text $ls $at
  $new = if (Test-Blank $pad) { ConvertTo-JsoncValue $value $pad $unit $newline } else { ConvertTo-JsoncValue $value $pad $null $newline }
  return $text.Substring(0, $node.start) + $new + $text.Substring($node.end)
}

function Edit-JsoncMembers([string]$text, $path, $old, $new) {
  # As install.py's jsonc_edit_members.
  foreach ($key in @($old.Keys)) { if (-not $new.Contains($key)) { $text = Remove-JsoncMember $text $path $key } }
  foreach ($key in @($new.Keys)) {
    $value = $new[$key]
    if (-not $old.Contains($key)) { $text = Add-JsoncMember $text $path $key $value }
    elseif (Test-JsonSame $old[$key] $value) { continue }
    elseif ($old[$key] -is [System.Collections.IDictionary] -and $value -is [System.Collections.IDictionary]) { $text = Edit-JsoncMembers $text (@($path) + @($key)) $old[$key] $value }
    else { $text = Set-JsoncMember $text $path $key $value }
  }
  return $text
}

function Edit-Jsonc([string]$text, $new) {
  # As install.py's edit_json: the text edited so that it reads as $new; every other byte stays.
  $old = ConvertFrom-Jsonc $text
  if (-not ($old -is [System.Collections.IDictionary])) { throw "the existing file is not a JSON object" }
  $edited = Edit-JsoncMembers $text @() $old $new
  if (-not (Test-JsonSame (ConvertFrom-Jsonc $edited) $new)) { throw "the file could not be edited without disturbing it" }
  return $edited
}

function Read-TeamText([string]$path, [string]$merge) {
  # As install.py's read_text: a JSON file as it is on disk (its byte order mark and CRLF kept).
  if ($merge -eq "json") { return [Text.Encoding]::UTF8.GetString([IO.File]::ReadAllBytes($path)) }
  return [IO.File]::ReadAllText($path)
}

function Write-TeamFile([string]$path, [string]$text, $secret) {
  # As install.py's write_file: a temporary file beside it, then a rename (File.Replace keeps the
  # file's own permissions); readable by this user only when it holds a key.
  $dir = Split-Path $path; New-Item -ItemType Directory -Force -Path $dir | Out-Null
  $tmp = Join-Path $dir (".team-gateway-" + [IO.Path]::GetRandomFileName())
  try {
    [IO.File]::WriteAllText($tmp, $text, (New-Object System.Text.UTF8Encoding $false))
    if (Test-Path -LiteralPath $path) { [IO.File]::Replace($tmp, $path, [NullString]::Value) } else { [IO.File]::Move($tmp, $path) }
  } finally { if (Test-Path -LiteralPath $tmp) { Remove-Item -LiteralPath $tmp -Force } }
  if ($secret) { Protect-File $path }
}

function Merge-Deep($into, $new) {
  foreach ($k in @($new.Keys)) {
    if (($new[$k] -is [System.Collections.IDictionary]) -and ($into.Contains($k)) -and ($into[$k] -is [System.Collections.IDictionary])) {
      Merge-Deep $into[$k] $new[$k]
    } else { $into[$k] = $new[$k] }
  }
}

function Get-At($node, [string]$dotted) {
  foreach ($p in $dotted.Split(".")) {
    if ($node -is [System.Collections.IDictionary] -and $node.Contains($p)) { $node = $node[$p] } else { return $null }
  }
  return $node
}

function Set-At($node, [string]$dotted, $value) {
  $parts = $dotted.Split(".")
  for ($i = 0; $i -lt $parts.Length - 1; $i++) {
    if (-not ($node[$parts[$i]] -is [System.Collections.IDictionary])) { $node[$parts[$i]] = [ordered]@{} }
    $node = $node[$parts[$i]]
  }
  $node[$parts[-1]] = $value
}

function Remove-Owned($data, $owned) {
  # "mcpServers.teamgw-": drop the entries named with our prefix (our MCP servers), keep the user's.
  foreach ($spec in @($owned)) {
    if (-not $spec) { continue }
    $i = $spec.LastIndexOf("."); $node = Get-At $data $spec.Substring(0, $i); $prefix = $spec.Substring($i + 1)
    if ($node -is [System.Collections.IDictionary]) { foreach ($k in @($node.Keys)) { if ($k.StartsWith($prefix)) { $node.Remove($k) } } }
  }
}

function Test-OwnedTable([string]$name, $names, $owned) {
  foreach ($n in @($names)) { if ($n -and ($name -eq $n -or $name.StartsWith("$n."))) { return $true } }
  foreach ($o in @($owned)) { if ($o -and $name.StartsWith($o)) { return $true } }
  return $false
}

function Merge-Json($old, $file) {
  # Same rules as install.py's merge_json: deep merge; `replace` keys take our value whole; `lists`
  # ("path:id:base") keep the user's entries that have neither our id nor our base URL.
  $new = ConvertTo-Table ($file.content | ConvertFrom-Json)
  $theirs = [ordered]@{}
  if ($null -eq $old -or $old.Trim() -eq "") { $data = $new }
  else {
    $data = ConvertFrom-Jsonc $old  # JSONC too: Edit-Jsonc writes only what changed into it
    if (-not ($data -is [System.Collections.IDictionary])) { throw "the existing file is not a JSON object" }
    $theirs = ConvertFrom-Jsonc $old
    Remove-Owned $data $file.owned
    Merge-Deep $data $new
  }
  foreach ($dotted in $file.replace) {
    $value = Get-At $new $dotted
    if ($null -ne $value) { Set-At $data $dotted $value }
  }
  foreach ($spec in $file.lists) {
    $dotted, $idKey, $baseKey = $spec.Split(":")
    $ours = @(Get-At $new $dotted)
    $ids = @($ours | ForEach-Object { $_[$idKey] }); $bases = @($ours | ForEach-Object { $_[$baseKey] } | Where-Object { $_ })
    $kept = @(@(Get-At $theirs $dotted) | Where-Object { $_ -is [System.Collections.IDictionary] -and -not (($ids -contains $_[$idKey]) -or ($bases -contains $_[$baseKey])) })
    Set-At $data $dotted (@($ours) + $kept)
  }
  foreach ($dotted in $file.remove) {
    $parts = $dotted.Split("."); $node = $data; $keep = $new
    for ($i = 0; $i -lt $parts.Length - 1; $i++) {
      if ($node -is [System.Collections.IDictionary] -and $node.Contains($parts[$i])) { $node = $node[$parts[$i]] } else { $node = $null; break }
      if ($keep -is [System.Collections.IDictionary] -and $keep.Contains($parts[$i])) { $keep = $keep[$parts[$i]] } else { $keep = @{} }
    }
    $last = $parts[-1]
    if ($node -is [System.Collections.IDictionary] -and $node.Contains($last) -and -not $keep.Contains($last)) { $node.Remove($last) }
  }
  if ($null -eq $old -or $old.Trim() -eq "") { return (ConvertTo-PyJson $data "  " "") + "`n" }
  return Edit-Jsonc $old $data
}

function Split-Toml([string]$text) {
  $top = New-Object System.Collections.ArrayList; $tables = New-Object System.Collections.ArrayList; $cur = $null
  foreach ($line in ($text -split "`r?`n")) {
    if ($line -match '^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$' -and -not $line.TrimStart().StartsWith("#")) {
      $cur = @{ name = ($Matches[1] -replace '["'' ]', ""); lines = New-Object System.Collections.ArrayList }
      [void]$cur.lines.Add($line); [void]$tables.Add($cur)
    } elseif ($null -eq $cur) { [void]$top.Add($line) } else { [void]$cur.lines.Add($line) }
  }
  return @{ top = $top; tables = $tables }
}

function Merge-Toml($old, $file) {
  if ($null -eq $old -or $old.Trim() -eq "") { return $file.content }
  $ours = Split-Toml $file.content; $theirs = Split-Toml $old
  $keys = @($ours.top | Where-Object { $_ -match '^\s*([A-Za-z0-9_\-"''.]+)\s*=' } | ForEach-Object { ($_ -split "=")[0].Trim().Trim('"', "'") })
  $names = @($ours.tables | ForEach-Object { $_.name })
  $out = New-Object System.Collections.ArrayList
  $ours.top | Where-Object { $_.Trim() -ne "" } | ForEach-Object { [void]$out.Add($_) }
  [void]$out.Add("")
  foreach ($l in $theirs.top) {
    if ($l.StartsWith("# Team gateway")) { continue }  # our stamp and notes: replaced, never piled up
    $m = $l -match '^\s*([A-Za-z0-9_\-"''.]+)\s*='
    if (-not ($m -and ($keys -contains $Matches[1].Trim('"', "'")))) { [void]$out.Add($l) }
  }
  foreach ($t in $theirs.tables) {
    if (-not (Test-OwnedTable $t.name $names $file.owned)) { $t.lines | ForEach-Object { [void]$out.Add($_) } }
  }
  foreach ($t in $ours.tables) { [void]$out.Add(""); $t.lines | ForEach-Object { [void]$out.Add($_) } }
  return ((($out -join "`n").Trim("`n")) -replace "`n{3,}", "`n`n") + "`n"
}

function Merge-Dotenv($old, $file) {
  if ($null -eq $old) { return $file.content }
  $names = @($file.content -split "`r?`n" | Where-Object { $_ -match '^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=' } | ForEach-Object { $Matches[1] })
  $kept = @($old -split "`r?`n" | Where-Object { -not (($_ -match '^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=') -and ($names -contains $Matches[1])) -and -not $_.StartsWith("# Team gateway config") })
  $body = ($kept -join "`n").TrimEnd("`n")
  if ($body) { $body += "`n" }
  return $body + $file.content
}

function Get-YamlItems($lines, [string]$key) {
  # As install.py's yaml_items: the items of the top-level block `key:` (a list, or a mapping whose
  # child's key is its name: Goose's extensions), @{start; end; indent; name}.
  $items = New-Object System.Collections.ArrayList; $idx = -1
  for ($i = 0; $i -lt $lines.Count; $i++) { if ($lines[$i] -match "^${key}:\s*(#.*)?$") { $idx = $i; break } }
  if ($idx -lt 0) { return ,$items }
  $indent = -1; $mapping = $false
  for ($i = $idx + 1; $i -lt $lines.Count; $i++) {
    $l = $lines[$i]; $body = $l.Trim()
    if (-not $body -or $body.StartsWith("#")) { continue }
    $col = $l.Length - $l.TrimStart(" ").Length
    if ($indent -lt 0) { $mapping = -not $body.StartsWith("-"); if ($mapping -and $col -eq 0) { break }; $indent = $col }
    if ($col -lt $indent -or ($col -eq $indent -and -not $mapping -and -not $body.StartsWith("-"))) { break }
    if ($col -eq $indent) {
      [void]$items.Add(@{ start = $i; end = $i + 1; indent = $indent; name = "" })
      if ($mapping) { if ($body -notmatch '^([''"]?)(.+?)\1:(\s|$)') { break }; $items[$items.Count - 1].name = $Matches[2]; continue }
    }
    $item = $items[$items.Count - 1]; $item.end = $i + 1
    if ($mapping) { continue }
    if (-not $item.name -and ($col -eq $indent -or $col -eq $indent + 2) -and $body -match '^(?:-\s+)?name:\s*(.+)$') { $item.name = $Matches[1].Trim().Trim('"', "'") }
  }
  return ,$items
}

function Split-YamlList([string]$text, [string]$key) {
  # As install.py's cut_list: @{ rest = the text without the list `key:`; lines = that list's lines }.
  $lines = [System.Collections.ArrayList]@($text -split "`r?`n"); $idx = -1
  for ($i = 0; $i -lt $lines.Count; $i++) { if ($lines[$i] -match "^${key}:\s*(#.*)?$") { $idx = $i; break } }
  if ($idx -lt 0) { return @{ rest = $text; lines = @() } }
  $found = Get-YamlItems $lines $key
  $end = if ($found.Count) { $found[$found.Count - 1].end } else { $idx + 1 }
  $items = @(if ($end -gt $idx + 1) { $lines[($idx + 1)..($end - 1)] })
  $lines.RemoveRange($idx, $end - $idx)
  return @{ rest = ($lines -join "`n"); lines = $items }
}

function Merge-YamlOwned([string]$text, [string]$key, [string]$prefix, $items) {
  # As install.py's merge_owned_list (Continue's mcpServers: list, Goose's extensions: mapping): our
  # items first between this block's markers, at the indent of the user's items; the marked block and
  # every item named with our prefix go first (ours by name); the user's items stay; a header left
  # with no item goes (Continue would read it as null).
  $begin = "# >>> team-gateway $key (managed by the portal installer; edits here are replaced)"; $end = "# <<< team-gateway $key"
  $lines = New-Object System.Collections.ArrayList; $skip = $false
  foreach ($l in ($text -split "`r?`n")) {
    if ($l.Trim().StartsWith("# >>> team-gateway $key ")) { $skip = $true; continue }
    if ($skip) { if ($l.Trim() -eq $end) { $skip = $false }; continue }
    [void]$lines.Add($l)
  }
  $drop = @{}
  foreach ($it in (Get-YamlItems $lines $key)) { if ($it.name.StartsWith($prefix)) { for ($i = $it.start; $i -lt $it.end; $i++) { $drop[$i] = $true } } }
  $kept = New-Object System.Collections.ArrayList
  for ($i = 0; $i -lt $lines.Count; $i++) { if (-not $drop.ContainsKey($i)) { [void]$kept.Add($lines[$i]) } }
  $lines = $kept; $idx = -1; $inline = -1
  for ($i = 0; $i -lt $lines.Count; $i++) { if ($lines[$i] -match "^${key}:\s*(#.*)?$") { $idx = $i; break } }
  for ($i = 0; $i -lt $lines.Count; $i++) { if ($lines[$i] -match "^${key}:\s*(\[\s*\]|\{\s*\})\s*(#.*)?$") { $inline = $i; break } }
  $has = @($items).Count -gt 0
  if ($idx -lt 0 -and $inline -ge 0 -and $has) { $lines[$inline] = "${key}:"; $idx = $inline }
  if ($idx -lt 0 -and $has -and @($lines | Where-Object { $_ -match "^${key}:" }).Count) { throw "the top-level $key list is written inline; add the team's entries by hand" }
  if (-not $has) {
    if ($idx -ge 0 -and -not (Get-YamlItems $lines $key).Count) { $lines.RemoveAt($idx) }
    return ($lines -join "`n").TrimEnd("`n") + "`n"
  }
  $rest = Get-YamlItems $lines $key
  $have = (@($items | Where-Object { $_.Trim() } | ForEach-Object { $_.Length - $_.TrimStart(" ").Length }) | Measure-Object -Minimum).Minimum
  $pad = if ($rest.Count) { " " * $rest[0].indent } else { " " * $have }
  $block = @("$pad$begin") + @($items | ForEach-Object { if ($_.Trim()) { "$pad" + $_.Substring($have) } else { "" } }) + @("$pad$end")
  if ($idx -lt 0) { [void]$lines.Add("${key}:"); $idx = $lines.Count - 1 }
  $new = @($lines[0..$idx]) + $block + @(if ($idx + 1 -lt $lines.Count) { $lines[($idx + 1)..($lines.Count - 1)] })
  return ($new -join "`n").TrimEnd("`n") + "`n"
}

function Merge-WithOwned($old, $file, [scriptblock]$merge) {
  # As install.py's merge_with_owned: `merge` for the rest of our file, then each block whose items
  # we own by name (`owned`: Continue's "mcpServers.teamgw-", Goose's "extensions.teamgw-").
  $content = $file.content; $lists = @()
  foreach ($o in @($file.owned)) {
    if (-not $o) { continue }
    $i = $o.LastIndexOf("."); $split = Split-YamlList $content $o.Substring(0, $i); $content = $split.rest
    $lists += ,@{ key = $o.Substring(0, $i); prefix = $o.Substring($i + 1); lines = $split.lines }
  }
  $text = & $merge $old $content
  foreach ($l in $lists) { $text = Merge-YamlOwned $text $l.key $l.prefix $l.lines }
  return $text
}

function Merge-YamlModels($old, $file) {
  # Continue's config.yaml, as install.py's merge_yaml_models.
  return Merge-WithOwned $old $file { param($o, $c) Merge-YamlModelList $o $c }
}

function Merge-YamlModelList($old, [string]$content) {
  # As install.py's merge_models: our block is always between the markers (a fresh install too, so
  # the next one finds it), first in the list; unmarked entries with our name suffix and base URL go.
  $ourLines = $content -split "`r?`n"; $start = [array]::IndexOf($ourLines, "models:") + 1
  $items = New-Object System.Collections.ArrayList
  for ($i = $start; $i -lt $ourLines.Length; $i++) {
    $l = $ourLines[$i]; if ($l -and -not ($l.StartsWith(" ") -or $l.StartsWith("-") -or $l.StartsWith("#"))) { break }; [void]$items.Add($l)
  }
  $stamp = @($ourLines | Where-Object { $_.StartsWith("# Team gateway config") }) | Select-Object -First 1
  $base = (@($items | Where-Object { $_ -match '^\s+apiBase:\s*(.+)$' } | ForEach-Object { $Matches[1].Trim() }) | Select-Object -First 1)
  if ($null -eq $old -or $old.Trim() -eq "") {
    $head = @($ourLines[0..($start - 1)] | Where-Object { -not $_.StartsWith("# Team gateway config") })
    $tail = @(if ($start + $items.Count -lt $ourLines.Length) { $ourLines[($start + $items.Count)..($ourLines.Length - 1)] })
    return ((@($head) + @($Begin, $stamp) + @($items) + @($End) + $tail) -join "`n").TrimEnd("`n") + "`n"
  }
  $lines = New-Object System.Collections.ArrayList; $skip = $false
  foreach ($l in ($old -split "`r?`n")) {
    if ($l.Trim() -eq $Begin) { $skip = $true; continue }
    if ($skip) { if ($l.Trim() -eq $End) { $skip = $false }; continue }
    if ($l.StartsWith("# Team gateway config")) { continue }
    [void]$lines.Add($l)
  }
  # Unmarked entries we wrote before: "- name: ... (team gateway)" items whose apiBase is ours.
  $kept = New-Object System.Collections.ArrayList; $item = $null; $itemIndent = -1
  $flush = { if ($null -ne $item) { $ours = ($item[0] -match '\(team gateway\)\s*$') -and (@($item | Where-Object { $_ -match '^\s+apiBase:\s*(.+)$' -and $Matches[1].Trim() -eq $base }).Count -gt 0); if (-not $ours) { $item | ForEach-Object { [void]$kept.Add($_) } } } }
  foreach ($l in $lines) {
    if ($l -match '^(\s*)-\s+name:') { & $flush; $item = New-Object System.Collections.ArrayList; $itemIndent = $Matches[1].Length; [void]$item.Add($l); continue }
    if ($null -ne $item -and ($l.Trim() -eq "" -or ($l.Length - $l.TrimStart().Length) -gt $itemIndent)) { [void]$item.Add($l); continue }
    & $flush; $item = $null; [void]$kept.Add($l)
  }
  & $flush
  $lines = $kept
  $idx = -1; for ($i = 0; $i -lt $lines.Count; $i++) { if ($lines[$i] -match '^models:\s*(#.*)?$') { $idx = $i; break } }
  if ($idx -lt 0) {
    if (@($lines | Where-Object { $_ -match '^models:' }).Count) { throw "the top-level models list is written inline; add the models by hand" }
    return ((@($lines) + @("models:", $Begin, $stamp) + @($items) + @($End)) -join "`n").TrimEnd("`n") + "`n"
  }
  $indent = 0
  for ($i = $idx + 1; $i -lt $lines.Count; $i++) {
    $l = $lines[$i]; if ($l.Trim() -and -not $l.TrimStart().StartsWith("#")) { if ($l -match '^(\s*)-') { $indent = $Matches[1].Length }; break }
  }
  $pad = " " * $indent
  $block = @("$pad$Begin", "$pad$stamp") + @($items | ForEach-Object { if ($_) { "$pad$_" } else { $_ } }) + @("$pad$End")
  $new = @($lines[0..$idx]) + $block + @(if ($idx + 1 -lt $lines.Count) { $lines[($idx + 1)..($lines.Count - 1)] })
  return ($new -join "`n").TrimEnd("`n") + "`n"
}

function Merge-YamlKeys($old, $file) {
  # Flat YAML (Aider's, Goose's config.yaml), as install.py's merge_yaml_keys.
  return Merge-WithOwned $old $file { param($o, $c) Merge-YamlFlat $o $c }
}

function Merge-YamlFlat($old, [string]$content) {
  if ($null -eq $old -or $old.Trim() -eq "") { return $content }
  $keys = @($content -split "`r?`n" | Where-Object { $_ -match '^([A-Za-z0-9_-]+):' } | ForEach-Object { $Matches[1] })
  $kept = New-Object System.Collections.ArrayList; $skip = $false
  foreach ($l in ($old -split "`r?`n")) {
    if ($l -match '^([A-Za-z0-9_-]+):') { $skip = $keys -contains $Matches[1] }
    elseif ($l.StartsWith("# Team gateway")) { continue }
    elseif ($l -and -not ($l.StartsWith(" ") -or $l.StartsWith("-"))) { $skip = $false }
    if (-not $skip) { [void]$kept.Add($l) }
  }
  $body = ($kept -join "`n").Trim("`n")
  if ($body) { return $content + "`n" + $body + "`n" }
  return $content
}

function Merge-YamlList($old, $file) {
  # As install.py's merge_yaml_list (llm's extra-openai-models.yaml, one top-level list): our items
  # between the markers at the end; the old block and unmarked items with our model_id prefix go first.
  $ours = @($file.content.TrimEnd("`n") -split "`r?`n")
  if ($null -eq $old -or $old.Trim() -eq "") { return ((@($Begin) + $ours + @($End)) -join "`n") + "`n" }
  $body = @($old -split "`r?`n" | Where-Object { -not $_.TrimStart().StartsWith("#") -and $_.Trim() })
  if ($body.Count -and $body[0].TrimStart().StartsWith("[")) { throw "the list is written inline; add the models by hand" }
  $lines = New-Object System.Collections.ArrayList; $skip = $false
  foreach ($l in ($old -split "`r?`n")) {
    if ($l.Trim() -eq $Begin) { $skip = $true; continue }
    if ($skip) { if ($l.Trim() -eq $End) { $skip = $false }; continue }
    if (-not $l.StartsWith("# Team gateway config")) { [void]$lines.Add($l) }
  }
  $kept = New-Object System.Collections.ArrayList; $item = $null; $indent = -1; $pad = ""
  $flush = { if ($null -ne $item) { if (-not (@($item | Where-Object { $_ -match '^\s*-?\s*model_id:\s*[''"]?teamgw/' }).Count)) { $item | ForEach-Object { [void]$kept.Add($_) } } } }
  foreach ($l in $lines) {
    if ($l -match '^(\s*)-') { if ($indent -lt 0) { $indent = $Matches[1].Length; $pad = $Matches[1] }; if ($Matches[1].Length -eq $indent) { & $flush; $item = New-Object System.Collections.ArrayList; [void]$item.Add($l); continue } }
    if ($null -ne $item) { [void]$item.Add($l) } else { [void]$kept.Add($l) }
  }
  & $flush
  $block = @("$pad$Begin") + @($ours | ForEach-Object { if ($_) { "$pad$_" } else { $_ } }) + @("$pad$End")
  return ((@($kept) + $block) -join "`n").Trim("`n") + "`n"
}

function Add-TheirTomlItems($out, $tables) {
  # The items of TOML lists of tables (a `[[x]]` header with its `[x.y]` subtables) that are not ours
  # (install.py's _toml_items and OUR_ITEM): name or provider "teamgw", or name "teamgw-…".
  $items = New-Object System.Collections.ArrayList
  foreach ($t in $tables) {
    $head = $t.lines[0].TrimStart()
    if ($items.Count -and -not $head.StartsWith("[[") -and $t.name.StartsWith($items[-1].name + ".")) { $t.lines | ForEach-Object { [void]$items[-1].lines.Add($_) } }
    else { [void]$items.Add(@{ name = $t.name; lines = [System.Collections.ArrayList]@($t.lines) }) }
  }
  foreach ($i in $items) {
    if (-not (@($i.lines | Where-Object { $_ -match '^\s*(name|provider)\s*=\s*"teamgw(-[^"]*)?"\s*$' }).Count)) { [void]$out.Add(""); $i.lines | ForEach-Object { [void]$out.Add($_) } }
  }
}

function Merge-TomlItems($old, $file) {
  # As install.py's merge_toml_items (Mistral Vibe): our top-level keys replace theirs; their
  # [[providers]]/[[models]] items with name or provider "teamgw", and [[mcp_servers]] items named
  # "teamgw-…" (ours), are dropped, ours appended.
  if ($null -eq $old -or $old.Trim() -eq "") { return $file.content }
  $ours = Split-Toml $file.content; $theirs = Split-Toml $old
  $keys = @($ours.top | Where-Object { $_ -match '^\s*([A-Za-z0-9_\-"''.]+)\s*=' } | ForEach-Object { ($_ -split "=")[0].Trim().Trim('"', "'") })
  $out = New-Object System.Collections.ArrayList
  $ours.top | Where-Object { $_.Trim() -ne "" } | ForEach-Object { [void]$out.Add($_) }
  [void]$out.Add("")
  foreach ($l in $theirs.top) {
    if ($l.StartsWith("# Team gateway")) { continue }
    $m = $l -match '^\s*([A-Za-z0-9_\-"''.]+)\s*='
    if (-not ($m -and ($keys -contains $Matches[1].Trim('"', "'")))) { [void]$out.Add($l) }
  }
  Add-TheirTomlItems $out $theirs.tables
  foreach ($t in $ours.tables) { [void]$out.Add(""); $t.lines | ForEach-Object { [void]$out.Add($_) } }
  return ((($out -join "`n").Trim("`n")) -replace "`n{3,}", "`n`n") + "`n"
}

function Protect-File([string]$path) {
  # The Windows equivalent of mode 0600: no inherited access, full control for this user only.
  & icacls $path /inheritance:r /grant:r "$($env:USERNAME):(F)" | Out-Null
}

# --- the user's own values our install replaced, put back by uninstall ----------------------------
# install.py's REPLACED: the first install over a file with nothing of ours remembers the user's
# values of the settings ours replace; a re-install keeps that record; uninstall puts them back.
# Names that look like credentials or headers are never written there, nor values holding one (they
# stay in the backup). A JSON value of any type comes back (install.py's too writes it as the user
# did; its TOML tables, YAML blocks and shared list entries are not mirrored here yet). install.py's
# WRITTEN (uninstall leaves a setting the user changed after the install as it is) is not mirrored
# here yet either: this uninstall takes out all of ours and puts the user's old values back.
$ReplacedPath = Expand-TeamPath "~/.config/team-gateway/replaced.json"
$SecretName = 'key|token|secret|passw|auth|header|cookie'

function Test-SecretName([string]$name) {
  # install.py's _secret_name: named like a credential, and not a limit on tokens (max_tokens).
  return ($name -match $SecretName) -and -not ($name -match 'max.*tokens$')
}

function Test-HoldsSecret($value) {
  # install.py's _holds_secret: a member named like a credential anywhere inside a value.
  if ($value -is [System.Collections.IDictionary]) {
    foreach ($k in @($value.Keys)) { if ((Test-SecretName $k) -or (Test-HoldsSecret $value[$k])) { return $true } }
  } elseif ($value -is [System.Collections.IList]) {
    foreach ($v in $value) { if (Test-HoldsSecret $v) { return $true } }
  }
  return $false
}

function Test-HoldsOurs([string]$text) {
  $lowered = $text.ToLowerInvariant()
  foreach ($mark in @("teamgw", "team gateway", "team-gateway", $Gateway.TrimEnd("/").ToLowerInvariant())) { if ($lowered.Contains($mark)) { return $true } }
  return $false
}

function Read-Replaced {
  $found = [ordered]@{}
  if (Test-Path -LiteralPath $ReplacedPath) {
    try { $found = ConvertTo-Table ([IO.File]::ReadAllText($ReplacedPath) | ConvertFrom-Json) } catch { $found = [ordered]@{} }
  }
  if (-not ($found -is [System.Collections.IDictionary])) { $found = [ordered]@{} }
  return $found
}

function Save-Replaced($replaced) {
  if ($replaced.Count) { Write-TeamFile $ReplacedPath ((ConvertTo-PyJson $replaced "  " "") + "`n") $true }
  elseif (Test-Path -LiteralPath $ReplacedPath) { Remove-Item -LiteralPath $ReplacedPath }
}

function Get-LineKey([string]$merge, [string]$line) {
  # The key a line of a line-based file sets (install.py's _line_key), or $null.
  if ($merge -eq "toml" -or $merge -eq "toml-items") { if ($line -match '^\s*([A-Za-z0-9_\-"''.]+)\s*=') { return $Matches[1].Trim('"', "'") }; return $null }
  if ($merge -eq "dotenv") { if ($line -match '^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=') { return $Matches[1] }; return $null }
  if ($line -match '^([A-Za-z0-9_-]+):\s*(\S.*)$' -and -not ($Matches[2] -match '^[|>#]')) { return $Matches[1] }  # flat YAML
  return $null
}

function Get-ReplacedValues($spec, [string]$old) {
  # install.py's replaced_values: a one-value file's text, a JSON file's values at our paths (or the
  # one on the way there that is not an object), a line-based file's lines setting our keys (with
  # where they stood); $null when none.
  if ($spec.merge -eq "text") {
    if ($old.Trim() -and -not $old.StartsWith($spec.prefix)) { return [ordered]@{ text = $old } }
    return $null
  }
  $found = New-Object System.Collections.ArrayList; $keptOut = New-Object System.Collections.ArrayList
  if ($spec.merge -eq "json") {
    $data = ConvertFrom-Jsonc $old
    if (-not ($data -is [System.Collections.IDictionary])) { return $null }
    foreach ($dotted in @($spec.paths)) {
      if (-not $dotted) { continue }
      $parts = @(if ($data.Contains($dotted)) { $dotted } else { $dotted.Split(".") })
      $node = $data; $there = $true
      for ($d = 0; $d -lt $parts.Count; $d++) {
        if (-not $node.Contains($parts[$d])) { $there = $false; break }
        $node = $node[$parts[$d]]
        # A string or list where ours has an object: it goes back whole.
        if ($d -lt $parts.Count - 1 -and -not ($node -is [System.Collections.IDictionary])) { $parts = @($parts[0..$d]); break }
      }
      $name = $parts -join "."
      if (-not $there -or ($keptOut -contains $name) -or (@($found | ForEach-Object { @($_.path) -join "." }) -contains $name)) { continue }
      if ((Test-SecretName $parts[-1]) -or (Test-HoldsSecret $node)) { [void]$keptOut.Add($name) } else { [void]$found.Add([ordered]@{ path = $parts; value = $node }) }
    }
    if ($found.Count -or $keptOut.Count) { return [ordered]@{ json = $found; kept_out = $keptOut } }
    return $null
  }
  if (@("toml", "toml-items", "dotenv", "yaml-keys") -notcontains $spec.merge) { return $null }
  $lines = @($old -split "`r?`n")
  if ($old.EndsWith("`n")) { $lines = @($lines | Select-Object -First ($lines.Count - 1)) }  # as Python's splitlines
  if ($spec.merge -like "toml*") { $lines = @((Split-Toml $old).top) }
  for ($i = 0; $i -lt $lines.Count; $i++) {
    $key = Get-LineKey $spec.merge $lines[$i]
    if (-not ($key -and (@($spec.keys) -contains $key))) { continue }
    if (Test-SecretName $key) { [void]$keptOut.Add($key) } else { [void]$found.Add([ordered]@{ at = $i; line = $lines[$i]; key = $key }) }
  }
  if ($found.Count -or $keptOut.Count) { return [ordered]@{ lines = $found; kept_out = $keptOut } }
  return $null
}

function Set-Parts($node, $parts, $value) {
  for ($i = 0; $i -lt $parts.Count - 1; $i++) {
    if (-not ($node[$parts[$i]] -is [System.Collections.IDictionary])) { $node[$parts[$i]] = [ordered]@{} }
    $node = $node[$parts[$i]]
  }
  $node[$parts[-1]] = $value
}

function Restore-Replaced([string]$installed, [string]$text, $record) {
  # install.py's put_back: the file with ours out ($text), and the user's remembered values back in
  # place (a JSON value edited into the installed text, so the member keeps its place).
  if ($record.Contains("text")) { return $record.text }
  if ($record.json.Count) {
    $data = [ordered]@{}; if ($text.Trim()) { $data = ConvertFrom-Jsonc $text }
    foreach ($item in @($record.json)) { Set-Parts $data @($item.path) $item.value }
    return Edit-Jsonc $installed $data
  }
  $lines = New-Object System.Collections.ArrayList
  $all = @($text -split "`r?`n"); if ($text.EndsWith("`n")) { $all = @($all | Select-Object -First ($all.Count - 1)) }
  foreach ($l in $all) { [void]$lines.Add($l) }
  foreach ($item in @($record.lines)) { $lines.Insert([Math]::Min([int]$item.at, $lines.Count), $item.line) }
  return ($lines -join "`n") + "`n"
}

function Test-PutsBack($record) {
  # install.py's puts_back: values to put back, not only the names of credentials kept out.
  return [bool]($record -and ($record.Contains("text") -or $record.json.Count -or $record.lines.Count))
}

function Get-ReplacedNames($record) {
  if ($record.json.Count) { return (@($record.json | ForEach-Object { @($_.path) -join "." }) -join ", ") }
  return (@($record.lines | ForEach-Object { $_.key }) -join ", ")
}

function Install-Bundle([string]$tok) {
  try {
    $bundle = Invoke-RestMethod -Method Post -Uri "$Portal/api/client-configs/bundle/" -ContentType "application/json" -Body (@{ token = $tok } | ConvertTo-Json)
  } catch {
    Write-Host "x the portal refused the download token: download tokens work once and for 10 minutes; get a new command from the portal."
    exit 1
  }
  $stamp = Get-Date -Format "yyyyMMdd-HHmmss"; $failures = 0
  $sent = @($bundle.files | ForEach-Object { $_.path })
  foreach ($spec in @($Specs.($bundle.client))) {
    # Our MCP entries in a file this bundle does not write (no team server allowed any more).
    if (-not $spec -or -not $spec.owned -or ($sent -contains $spec.path)) { continue }
    # As install.py's strip_owned: the owned entries out (and their object, left empty), nothing else.
    $path = Expand-TeamPath $spec.windows_path
    if (-not (Test-Path $path)) { continue }
    $old = Read-TeamText $path $spec.merge
    $only = [pscustomobject]@{ merge = $spec.merge; owned = $spec.owned; paths = @(); lists = @(); keys = @(); tables = @() }
    try { $text = Get-Unmerged $only $old } catch { $failures++; Write-Host "! ${path}: left unchanged ($($_.Exception.Message)); remove the teamgw-... MCP servers by hand"; continue }
    if (-not $text.Trim()) { $text = "{}`n" }
    if ($text -cne $old) { [IO.File]::WriteAllText("$path.bak-$stamp", $old); Protect-File "$path.bak-$stamp"; Write-TeamFile $path $text $spec.secret; Write-Host "+ ${path}: the team MCP servers no longer allowed are removed" }
  }
  $replaced = Read-Replaced
  foreach ($f in $bundle.files) {
    $path = Expand-TeamPath $f.windows_path
    $old = $null; if (Test-Path $path) { $old = Read-TeamText $path $f.merge }
    try {
      switch ($f.merge) {
        "json" { $text = Merge-Json $old $f }
        "toml" { $text = Merge-Toml $old $f }
        "dotenv" { $text = Merge-Dotenv $old $f }
        "yaml-models" { $text = Merge-YamlModels $old $f }
        "yaml-keys" { $text = Merge-YamlKeys $old $f }
        "yaml-list" { $text = Merge-YamlList $old $f }
        "toml-items" { $text = Merge-TomlItems $old $f }
        "text" { $text = $f.content }
        default { throw "no Windows merge for '$($f.merge)'" }
      }
    } catch { $failures++; Write-Host "! $path left unchanged ($($_.Exception.Message)). Copy $($f.name) from the portal page by hand."; continue }
    New-Item -ItemType Directory -Force -Path (Split-Path $path) | Out-Null
    if ($null -ne $old) { $backup = "$path.bak-$stamp"; [IO.File]::WriteAllText($backup, $old); Protect-File $backup }
    $spec = @($Specs.($bundle.client)) | Where-Object { $_ -and $_.path -eq $f.path } | Select-Object -First 1
    if ($null -ne $old -and $spec -and -not (Test-HoldsOurs $old)) {
      # A first install over the user's file: remember what ours replaces (or forget a stale record).
      $record = $null; try { $record = Get-ReplacedValues $spec $old } catch { }
      if ($record) { $record["backup"] = "$(Split-Path $path -Leaf).bak-$stamp"; $replaced[$path] = $record } elseif ($replaced.Contains($path)) { $replaced.Remove($path) }
    }
    Write-TeamFile $path $text $f.secret
    if ($f.merge -eq "dotenv" -and $f.path -eq "~/.config/team-gateway/env") {
      foreach ($l in ($f.content -split "`n")) {
        if ($l -match "^export\s+([A-Za-z_][A-Za-z0-9_]*)='?([^']*)'?$") { [Environment]::SetEnvironmentVariable($Matches[1], $Matches[2], "User") }
      }
    }
    Write-Host "+ $path"
  }
  # The per-model files (~/.claude/teamgw-*.json) of models this bundle no longer lists (install.py's
  # drop_stale_family): deleted after a backup when nothing but ours is in them.
  $sentPaths = @($bundle.files | ForEach-Object { Expand-TeamPath $_.windows_path })
  foreach ($spec in @($Specs.($bundle.client))) {
    if (-not $spec -or -not $spec.glob) { continue }
    foreach ($path in @(Get-ChildItem -Path (Expand-TeamPath $spec.windows_path) -File -ErrorAction SilentlyContinue | ForEach-Object { $_.FullName })) {
      if ($sentPaths -contains $path) { continue }
      $old = Read-TeamText $path $spec.merge
      try { $new = Get-Unmerged $spec $old } catch { $failures++; Write-Host "! $path left unchanged ($($_.Exception.Message)); remove the team gateway entries by hand"; continue }
      if ($new.Trim() -and $new -ne $spec.skeleton) { continue }
      [IO.File]::WriteAllText("$path.bak-$stamp", $old); Protect-File "$path.bak-$stamp"
      Remove-Item -LiteralPath $path; Write-Host "+ ${path}: deleted (backup: .bak-$stamp)"
    }
  }
  # CC Switch: PowerShell has no SQLite, so its import links (they carry the key; printed only when
  # they cannot be opened, so no console keeps the key).
  if ($bundle.links -and ($bundle.db_providers -or -not $bundle.files)) {
    foreach ($l in $bundle.links) {
      try { Start-Process $l.url; Write-Host "+ $($l.label): import link opened in CC Switch; confirm it there" }
      catch { Write-Host "-> $($l.label): open this link on this machine (it holds your key): $($l.url)" }
    }
  }
  Save-Replaced $replaced
  if ($bundle.key) { Write-Host "+ key $($bundle.key.name) ($($bundle.key.masked)) minted for this machine; revoke it on the portal if lost" }
  if ($bundle.key -and $bundle.key.replaced) { Write-Host ". it replaces the key minted before for this client ($($bundle.key.replaced.masked)), which stops at $($bundle.key.replaced.stops)" }
  foreach ($c in $bundle.commands) { Write-Host "-> $($c.label): $($c.text)" }
  foreach ($n in $bundle.notes) { Write-Host ". $n" }
  foreach ($w in $bundle.warnings) { Write-Host "! $w" }
  Write-Host ". config version $($bundle.version)"
  if ($failures) { exit 1 }
}

function Get-Dotted($data, [string]$path) {
  if ($path -eq "." -or $path -eq "") { return ,@($data) }
  $cur = @($data)
  foreach ($part in $path.Split(".")) {
    $next = @()
    foreach ($n in $cur) {
      if ($part -eq "*") { if ($n -is [System.Collections.IDictionary]) { $next += @($n.Values) } elseif ($n -is [array]) { $next += $n } }
      elseif ($n -is [System.Collections.IDictionary] -and $n.Contains($part)) { $next += ,$n[$part] }
    }
    $cur = $next
  }
  return ,$cur
}

function Invoke-Doctor([string]$client) {
  # JSON files are checked in full; TOML and YAML files only for the base URL (PowerShell has no parser for them).
  $probes = $Probes.$client
  if (-not $probes) { Write-Host (Convert-TeamText "unknown client $client"); exit 2 }
  $problems = 0; $key = $env:TEAM_GATEWAY_API_KEY; $servers = New-Object System.Collections.ArrayList
  foreach ($p in $probes) {
    if ($p.format -eq "ccswitch") { Write-Host ". $($p.file): CC Switch's database is checked on macOS and Linux only"; continue }
    $path = Expand-TeamPath $(if ($p.windows_file) { $p.windows_file } else { $p.file })
    if (-not (Test-Path $path)) {
      if ($p.mcp -and -not $p.base_url) { Write-Host ". $($p.file): no team MCP servers installed"; continue }
      Write-Host "x $($p.file): not found"; $problems++; continue
    }
    $text = [IO.File]::ReadAllText($path)
    if ($p.format -eq "json") {
      $data = ConvertFrom-Jsonc $text  # JSONC too (Zed's, VS Code's settings.json)
      $bases = Get-Dotted $data $p.base_url
      if ($p.mcp) {
        $entries = Get-At $data $p.mcp
        if ($entries -is [System.Collections.IDictionary]) { foreach ($n in @($entries.Keys)) { if ($n.StartsWith("teamgw-")) { [void]$servers.Add(@{ name = $n; url = $entries[$n][$p.mcp_url] }) } } }
        # As install.py's mcp_key: the key in our entries' Authorization header (Roo with no model listed).
        if (-not $key -and $entries -is [System.Collections.IDictionary]) {
          foreach ($n in @($entries.Keys)) {
            $auth = Get-At $entries[$n] "headers.Authorization"
            if ($n.StartsWith("teamgw-") -and $auth -is [string] -and $auth -match '^Bearer (?!PASTE-|\$\{)(.+)$') { $key = $Matches[1]; break }
          }
        }
      }
      if ($p.key -and -not $key) { $k = @(Get-Dotted $data $p.key) | Where-Object { $_ -and -not $_.StartsWith("PASTE-") -and -not $_.StartsWith("{env:") } | Select-Object -First 1; if ($k) { $key = $k } }
    } else {
      $bases = @([regex]::Matches($text, '(?m)(?:base_url|apiBase)\s*[:=]\s*"?([^"\s]+)"?') | ForEach-Object { $_.Groups[1].Value })
    }
    foreach ($b in $bases) {
      $b = $b.TrimEnd("/")
      $ok = if ($p.base_shape -eq "v1") { $b.EndsWith("/v1") } elseif ($p.base_shape -eq "chat") { $b.EndsWith("/v1/chat/completions") } else { -not $b.EndsWith("/v1") }
      if ($ok) { Write-Host "+ $($p.file): base URL $b has the right shape" } else { Write-Host "x $($p.file): base URL $b has the wrong shape ($($p.base_shape))"; $problems++ }
      break
    }
  }
  if (-not $key) { Write-Host "x no key found in the files or in TEAM_GATEWAY_API_KEY"; exit 1 }
  try {
    $models = Invoke-RestMethod -Uri "$Gateway/v1/models" -Headers @{ Authorization = "Bearer $key" }
    Write-Host "+ key valid"
    Write-Host ". models for this key: $((@($models.data) | ForEach-Object { $_.id }) -join ', ')"
  } catch { Write-Host "x the gateway rejected the key or is unreachable: $($_.Exception.Message)"; exit 1 }
  foreach ($s in $servers) {
    # The gateway's MCP endpoint is stateless Streamable HTTP: initialize, then tools/list.
    $headers = @{ Authorization = "Bearer $key"; Accept = "application/json, text/event-stream" }
    try {
      $hello = '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"team-gateway-doctor","version":"1"}}}'
      Invoke-WebRequest -UseBasicParsing -Method Post -Uri $s.url -Headers $headers -ContentType "application/json" -Body $hello | Out-Null
      $answer = Invoke-WebRequest -UseBasicParsing -Method Post -Uri $s.url -Headers $headers -ContentType "application/json" -Body '{"jsonrpc":"2.0","id":2,"method":"tools/list"}'
      $body = "$($answer.Content)"; if (-not $body.TrimStart().StartsWith("{")) { $body = (($body -split "`r?`n") | Where-Object { $_.StartsWith("data:") } | Select-Object -Last 1).Substring(5) }
      $result = ($body | ConvertFrom-Json).result
      $tools = @($result.tools | ForEach-Object { $_.name } | Sort-Object)
      $stored = if ($result._meta) { $result._meta.'gateway-portal/stored-catalog' } else { $null }
      if ($stored) { Write-Host "! MCP server $($s.name): the team's server is down ($($stored.reason)); as of its last check ($($stored.checked)) you may call $($tools -join ', ')" }
      elseif ($tools.Count) { Write-Host "+ MCP server $($s.name): you may call $($tools -join ', ')" } else { Write-Host "! MCP server $($s.name): reachable, but this key may call none of its tools" }
    } catch { Write-Host "x MCP server $($s.name) ($($s.url)): the gateway refused or is unreachable: $($_.Exception.Message)"; $problems++ }
  }
  if ($problems) { exit 1 }
}

function Remove-Path($data, [string]$dotted) {
  # Delete a dotted key (or a key with dots in its name), then the objects it left empty.
  if ($data.Contains($dotted)) { $data.Remove($dotted); return }
  $parts = $dotted.Split("."); $chain = @($data)
  for ($i = 0; $i -lt $parts.Length - 1; $i++) {
    $next = $chain[-1][$parts[$i]]; if (-not ($next -is [System.Collections.IDictionary])) { return }; $chain += ,$next
  }
  if (-not $chain[-1].Contains($parts[-1])) { return }
  $chain[-1].Remove($parts[-1])
  for ($i = $chain.Length - 1; $i -gt 0; $i--) { if ($chain[$i].Count) { break }; $chain[$i - 1].Remove($parts[$i - 1]) }
}

function Get-Unmerged($spec, [string]$text) {
  # What is left of one installed file once the team gateway's entries are out (install.py's unmerge_*).
  switch ($spec.merge) {
    "json" {
      $data = ConvertFrom-Jsonc $text
      foreach ($p in @($spec.paths)) { if ($p) { Remove-Path $data $p } }
      foreach ($l in @($spec.lists)) {
        if (-not $l) { continue }
        $dotted, $idKey, $baseKey = $l.Split(":")
        $kept = @(@(Get-At $data $dotted) | Where-Object { $_ -and -not ($_ -is [System.Collections.IDictionary] -and "$($_[$baseKey])".StartsWith($Gateway)) })
        if ($kept.Count) { Set-At $data $dotted $kept } else { Remove-Path $data $dotted }
      }
      Remove-Owned $data $spec.owned
      foreach ($o in @($spec.owned)) { if ($o) { $at = $o.Substring(0, $o.LastIndexOf(".")); $n = Get-At $data $at; if ($n -is [System.Collections.IDictionary] -and -not $n.Count) { Remove-Path $data $at } } }
      return Edit-Jsonc $text $data
    }
    "toml" {
      $split = Split-Toml $text; $out = New-Object System.Collections.ArrayList
      foreach ($l in $split.top) {
        if ($l.StartsWith("# Team gateway")) { continue }
        if (($l -match '^\s*([A-Za-z0-9_\-"''.]+)\s*=') -and (@($spec.keys) -contains $Matches[1].Trim('"', "'"))) { continue }
        [void]$out.Add($l)
      }
      foreach ($t in $split.tables) { if (-not (Test-OwnedTable $t.name $spec.tables $spec.owned)) { $t.lines | ForEach-Object { [void]$out.Add($_) } } }
      return ((($out -join "`n").Trim("`n")) -replace "`n{3,}", "`n`n") + "`n"
    }
    "toml-items" {
      # install.py's unmerge_toml_items (Mistral Vibe): our top-level keys and our items out.
      $split = Split-Toml $text; $out = New-Object System.Collections.ArrayList
      foreach ($l in $split.top) {
        if ($l.StartsWith("# Team gateway")) { continue }
        if (($l -match '^\s*([A-Za-z0-9_\-"''.]+)\s*=') -and (@($spec.keys) -contains $Matches[1].Trim('"', "'"))) { continue }
        [void]$out.Add($l)
      }
      Add-TheirTomlItems $out $split.tables
      return ((($out -join "`n").Trim("`n")) -replace "`n{3,}", "`n`n") + "`n"
    }
    "dotenv" {
      $kept = @($text -split "`r?`n" | Where-Object { -not (($_ -match '^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=') -and (@($spec.keys) -contains $Matches[1])) -and -not $_.StartsWith("# Team gateway config") })
      return (($kept -join "`n").TrimEnd("`n")) + "`n"
    }
    "yaml-keys" {
      # Our keys out, and the items of owned blocks named like ours (Goose's extensions).
      foreach ($o in @($spec.owned)) { if ($o) { $i = $o.LastIndexOf("."); $text = Merge-YamlOwned $text $o.Substring(0, $i) $o.Substring($i + 1) @() } }
      $kept = New-Object System.Collections.ArrayList; $skip = $false
      foreach ($l in ($text -split "`r?`n")) {
        if ($l -match '^([A-Za-z0-9_-]+):') { $skip = @($spec.keys) -contains $Matches[1] }
        elseif ($l.StartsWith("# Team gateway")) { continue }
        elseif ($l -and -not ($l.StartsWith(" ") -or $l.StartsWith("-"))) { $skip = $false }
        if (-not $skip) { [void]$kept.Add($l) }
      }
      return (($kept -join "`n").Trim("`n")) + "`n"
    }
    "text" { if ($text.StartsWith($spec.prefix)) { return "" }; return $text }
    default {
      # yaml-models, yaml-list: the items of owned lists named like ours (Continue's mcpServers), our
      # blocks between the markers, and our version lines.
      foreach ($o in @($spec.owned)) { if ($o) { $i = $o.LastIndexOf("."); $text = Merge-YamlOwned $text $o.Substring(0, $i) $o.Substring($i + 1) @() } }
      $kept = New-Object System.Collections.ArrayList; $skip = $false
      foreach ($l in ($text -split "`r?`n")) {
        if ($l.Trim().StartsWith("# >>> team-gateway ")) { $skip = $true } elseif ($skip) { $skip = -not $l.Trim().StartsWith("# <<< team-gateway ") } elseif (-not $l.StartsWith("# Team gateway config")) { [void]$kept.Add($l) }
      }
      return (($kept -join "`n").TrimEnd("`n")) + "`n"
    }
  }
}

function Invoke-Uninstall([string]$which) {
  $clients = if ($which -eq "all") { @($Specs.PSObject.Properties.Name) } else { @($which) }
  $plan = New-Object System.Collections.ArrayList; $replaced = Read-Replaced
  foreach ($c in $clients) {
    if (-not $Specs.$c) { Write-Host (Convert-TeamText "unknown client $c"); exit 2 }
    foreach ($spec in @($Specs.$c)) {
      if ($spec.merge -eq "ccswitch") { Write-Host ". $($spec.path): remove the $($c) provider Team Gateway in CC Switch itself"; continue }
      # A family of per-model files (`glob`: ~/.claude/teamgw-*.json): every file its pattern finds.
      $paths = @(Expand-TeamPath $spec.windows_path)
      if ($spec.glob) { $paths = @(Get-ChildItem -Path $paths[0] -File -ErrorAction SilentlyContinue | ForEach-Object { $_.FullName }) }
      foreach ($path in $paths) {
        if (-not (Test-Path -LiteralPath $path)) { continue }
        $old = Read-TeamText $path $spec.merge
        try { $new = Get-Unmerged $spec $old } catch { Write-Host "! $path left unchanged ($($_.Exception.Message)); remove the team gateway entries by hand"; continue }
        if ($new -ceq $old) { continue }
        $delete = (-not $new.Trim()) -or ($new -eq $spec.skeleton)
        $record = $replaced[$path]
        if (Test-PutsBack $record) {
          # The user's own values our install replaced go back in (install.py's unmerged).
          $base = $new; if ($new -eq $spec.skeleton) { $base = "" }
          try { $new = Restore-Replaced $old $base $record; $delete = $false } catch { Write-Host "! $path left unchanged ($($_.Exception.Message)); remove the team gateway entries by hand"; continue }
        }
        [void]$plan.Add(@{ path = $path; old = $old; new = $new; delete = $delete; secret = $spec.secret; record = $record })
        if ($delete) { Write-Host ". delete (only ours in it): $path" } else { Write-Host ". remove our entries from: $path" }
      }
    }
  }
  if (-not $plan.Count) { Write-Host ". nothing of the team gateway's is installed here for: $($clients -join ', ')"; return }
  if (-not $Yes) {
    $answer = Read-Host "$(Convert-TeamText "Remove the team gateway's entries listed above?") [y/N]"
    if ($answer -notmatch '^(y|yes)$') { Write-Host "x nothing removed (pass -Yes to remove without asking)"; exit 1 }
  }
  $stamp = Get-Date -Format "yyyyMMdd-HHmmss"
  foreach ($p in $plan) {
    [IO.File]::WriteAllText("$($p.path).bak-$stamp", $p.old)
    if ($p.delete) { Remove-Item $p.path; Write-Host "+ $($p.path): deleted (backup: .bak-$stamp)" }
    else {
      Write-TeamFile $p.path $p.new $p.secret
      if ($p.record -and $p.record.Contains("text")) { Write-Host "+ $($p.path): your own value put back (backup: .bak-$stamp)" }
      elseif (Test-PutsBack $p.record) { Write-Host "+ $($p.path): our entries removed and your own $(Get-ReplacedNames $p.record) put back (backup: .bak-$stamp)" }
      else { Write-Host "+ $($p.path): our entries removed (backup: .bak-$stamp)" }
    }
    if ($p.record -and $p.record.kept_out.Count) {
      # The user's own credentials: never stored by us, so only the first install's backup has them.
      Write-Host "! $($p.path): your own $(@($p.record.kept_out) -join ', ') from before the install is not put back (we never store a credential); it is in $($p.record.backup)"
    }
    if ($replaced.Contains($p.path)) { $replaced.Remove($p.path) }
  }
  Save-Replaced $replaced
  Write-Host ". the keys minted for these clients still work until you revoke them on the portal"
}

if ($Check) { Invoke-Doctor $Check }
elseif ($Uninstall) { Invoke-Uninstall $Uninstall }
elseif ($Token) { Install-Bundle $Token }
else { Write-Host (Convert-TeamText "usage: -Token <download-token> (from $Portal/connect/), -Check <client> or -Uninstall <client>|all [-Yes]"); exit 2 }
